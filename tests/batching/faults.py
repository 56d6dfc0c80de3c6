"""A rate limiter with a bug, to make a batcher's own loop fail (`batching.supervise`)."""


class FaultyGate:
    """An `ExecutionGate` whose first `faults` acquires raise; then it grants every one."""

    def __init__(self, faults: int = 1) -> None:
        self.faults = faults

    def acquire(self, executor: object, wake: object) -> bool:
        if self.faults:
            self.faults -= 1
            raise RuntimeError("a bug in the rate limiter")
        return True

    def withdraw(self, executor: object) -> None:
        pass

    def release(self, executor: object, again: bool = False) -> None:
        pass
