"""`Option`: one command-line option as Triton's parser knows it, and what Convoy makes of it;
`Profile`: whose defaults a command takes (`tritonserver`'s are Triton's, `convoy serve`'s are
safer)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from server.options._values import Value


class Support(Enum):
    """What Convoy does with an option."""

    SERVED = "served"  # it does what it does in Triton
    NO_EFFECT = "no effect"  # accepted and logged once: it tunes something Convoy does not have
    REFUSED = "refused"  # a value other than Triton's default stops the start: not supported
    CONVOY = "convoy"  # Convoy's own option; Triton has no such option


class Profile(Enum):
    """Which command parses: the defaults differ, the options do not."""

    TRITON = "tritonserver"
    CONVOY = "convoy serve"


_SAME = object()  # convoy serve takes tritonserver's default


@dataclass(frozen=True, slots=True)
class Option:
    """One option: its spelling, how its value is read, Triton's meaning and default, and
    Convoy's behaviour. A repeatable option's value is a tuple of what `value` reads."""

    name: str  # Triton's spelling, without the leading dashes
    value: Value
    meaning: str  # what the option does in Triton (Convoy's own options: in Convoy)
    support: Support
    triton_default: str = ""  # Triton's default in the docs' table ("" for Convoy's own)
    default: object = None  # tritonserver's default value (None: unset)
    convoy_default: object = _SAME  # convoy serve's default value, where it differs
    behaviour: str = ""  # Convoy's behaviour where it is not plainly Triton's; the reason, if
    # NO_EFFECT or REFUSED
    aliases: tuple[str, ...] = ()  # other spellings (Triton's --model-store)
    repeat: bool = False  # may be given several times

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    @property
    def flags(self) -> tuple[str, ...]:
        return tuple(f"--{name}" for name in (*self.aliases, self.name))

    def default_for(self, profile: Profile) -> object:
        if profile is Profile.CONVOY and self.convoy_default is not _SAME:
            return self.convoy_default
        return self.default

    @property
    def differs(self) -> bool:
        """convoy serve's default is not tritonserver's."""
        return self.convoy_default is not _SAME and self.convoy_default != self.default
