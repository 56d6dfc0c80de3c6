"""`InProcess`: what an instance whose model lives in the server's own process says of itself."""

from __future__ import annotations

from backends.base import ModelSignature
from backends.device import Device


class InProcess:
    """The `Instance` properties of a model held in this process (a session, a module, a compiled
    package): the name, signature and device it was made with, and always healthy, never
    restarted, since no other process can fail it. The instance sets `_name`, `_signature` and
    `_device`."""

    _name: str
    _signature: ModelSignature
    _device: Device

    @property
    def name(self) -> str:
        return self._name

    @property
    def signature(self) -> ModelSignature:
        return self._signature

    @property
    def device(self) -> Device:
        return self._device

    @property
    def healthy(self) -> bool:
        return True

    @property
    def restarts(self) -> int:
        return 0

    async def ready(self) -> bool:
        return True
