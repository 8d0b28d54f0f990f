"""The TOML configuration file, structured with cattrs into frozen attrs classes.

Every key has a default, so an absent file (or an empty one) is a valid config.
Unknown keys and bad values are errors naming the key path
(``providers.codex.comand: unknown key``): a typo must never be silently ignored,
because an ignored ``command`` would run a different binary than the user meant.

Provider commands left out are discovered: the binary on ``PATH``, else the
pinned install route the test scripts use. A provider that cannot be found has
``command = None``; whoever spawns it reports that, loading the config does not.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import shutil
import sys
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import attrs
import cattrs
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError, IterableValidationError
from cattrs.gen import make_dict_structure_fn

from t3orch.provider_versions import CODEX_TESTED

MiB = 1024 * 1024


class ConfigError(Exception):
    """The config file cannot be used; the message names the file and every bad key."""


# -- discovery -------------------------------------------------------------------


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def codex_cache_binary(home: Path | None = None) -> Path:
    """Where ``scripts/install-codex`` puts the pinned native binary."""
    root = os.environ.get("T3ORCH_CACHE")
    cache = Path(root) if root else (home or Path.home()) / ".cache" / "t3orch"
    return (
        cache
        / f"codex-{CODEX_TESTED}"
        / "node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"
    )


def discover_codex(path: str | None = None, home: Path | None = None) -> list[str] | None:
    found = shutil.which("codex", path=path)
    if found:
        return [found]
    cached = codex_cache_binary(home)
    return [str(cached)] if _executable(cached) else None


def discover_claude(path: str | None = None) -> list[str] | None:
    found = shutil.which("claude", path=path)
    if found:
        return [found]
    # find_spec, not import: importing the SDK drags in anyio and mcp for nothing.
    spec = importlib.util.find_spec("claude_agent_sdk")
    for location in (spec.submodule_search_locations or []) if spec else []:
        bundled = Path(location) / "_bundled" / "claude"
        if _executable(bundled):
            return [str(bundled)]
    return None


def standin_command() -> list[str]:
    # A command line, not an import: the core never imports the adapters.
    return [sys.executable, "-m", "adapters.standin"]


# -- the schema ------------------------------------------------------------------


@attrs.frozen
class DaemonConfig:
    #: ``None``: ``--state-dir``, ``$T3ORCH_STATE_DIR`` or the XDG state home decide.
    state_dir: Path | None = None
    synchronous: Literal["FULL", "NORMAL"] = "FULL"
    api_host: str = "127.0.0.1"
    #: 0 = an ephemeral port, written to ``<state-dir>/api.port`` once bound.
    api_port: int = 0
    #: A non-loopback ``api_host`` is refused unless this is set as well.
    api_allow_remote: bool = False
    max_frame_bytes: int = MiB
    #: WebSocket connections at once (further capped by RLIMIT_NOFILE less a reserve).
    api_max_connections: int = 1024
    #: WebSocket connections at once that have not (yet) presented the token.
    api_max_unauthenticated: int = 64
    #: A WebSocket connection without the token is closed this long after its accept.
    api_auth_timeout_s: float = 10.0
    #: Events buffered per subscription before a slow client gets ``resync``.
    subscription_buffer: int = 4096
    idle_timeout_s: float = 1800.0
    #: Recover a run whose provider crashed mid-turn as a ``provider_recovery`` attempt.
    recover_interrupted_runs: bool = False
    restart_intensity: int = 3
    restart_period_s: float = 60.0
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    #: Delta handoffs a provider thread may accumulate (characters) before a return
    #: to it starts a fresh provider thread with a full summary instead.
    max_delta_handoff_chars: int = 24_000
    #: A turn with no provider frame this long is reported (``turn_stalled``).
    stall_warning_s: float = 60.0
    #: A turn with no provider frame this long (and no request waiting for the user)
    #: ends ``failed`` and its runtime is killed; 0 = never.
    stall_timeout_s: float = 600.0
    #: A graceful stop lets running turns end for up to this long before it
    #: interrupts them; 0 = interrupt at once.
    stop_drain_s: float = 30.0
    #: This daemon's name in the fleet registry (``threads`` shows it as the HOST);
    #: empty: the machine's host name.
    host_name: str = ""
    #: The address other daemons reach this one's API on (``ws://ADDRESS:port``);
    #: empty: ``api_host``.
    advertise_host: str = ""
    #: How often the daemon renews its row in the fleet registry.
    heartbeat_s: float = 2.0
    #: A daemon whose last heartbeat is older than this is offline.
    heartbeat_timeout_s: float = 10.0
    #: Providers run under a holder that outlives the daemon this long without one, so a
    #: restarted daemon reattaches to their turns; 0 = no holder, they die with the daemon.
    reattach_grace_s: float = 600.0


@attrs.frozen
class CodexConfig:
    command: list[str] | None = attrs.field(factory=discover_codex)
    env: dict[str, str] = attrs.field(factory=dict)
    #: The ``CODEX_HOME`` given to the provider; ``None`` keeps the inherited one.
    home: Path | None = None
    model: str | None = None
    #: App threads one ``codex app-server`` process hosts at most (compatible settings
    #: share one); 1 = a process per thread. Not used while live restore holds each
    #: runtime (``daemon.reattach_grace_s`` > 0): a shared process is not held yet.
    max_threads_per_process: int = 16


@attrs.frozen
class ClaudeConfig:
    command: list[str] | None = attrs.field(factory=discover_claude)
    env: dict[str, str] = attrs.field(factory=dict)
    model: str | None = None


@attrs.frozen
class StandinConfig:
    command: list[str] = attrs.field(factory=standin_command)
    #: A transcript to play; ``None`` lets the stand-in pick its default.
    transcript: Path | None = None


@attrs.frozen
class ProvidersConfig:
    codex: CodexConfig = attrs.field(factory=CodexConfig)
    claude: ClaudeConfig = attrs.field(factory=ClaudeConfig)
    standin: StandinConfig = attrs.field(factory=StandinConfig)


@attrs.frozen
class StoreConfig:
    #: A ``postgresql://`` URL: the log shared by several daemons. ``None``: the
    #: embedded SQLite file in the state dir.
    url: str | None = None


@attrs.frozen
class Config:
    daemon: DaemonConfig = attrs.field(factory=DaemonConfig)
    providers: ProvidersConfig = attrs.field(factory=ProvidersConfig)
    store: StoreConfig = attrs.field(factory=StoreConfig)


def store_url_problem(url: str) -> str | None:
    """Why ``url`` cannot name a store (None: it can). Only the scheme is checked here:
    the server says the rest when the store opens."""
    if url.startswith(("postgresql://", "postgres://")):
        return None
    return f"{url!r} is not a PostgreSQL URL (postgresql://user@host:port/database)"


# -- structuring -----------------------------------------------------------------

_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}


def _strict(tp: type) -> Callable[[Any, Any], Any]:
    # cattrs coerces by default (1 -> "1", "abc" -> ['a','b','c']); a config must not.
    def hook(value: Any, _: Any) -> Any:
        if tp is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, bool) and tp is not bool:
            raise ValueError(f"expected {_TYPE_NAMES[tp]}, got a boolean")
        if not isinstance(value, tp):
            raise ValueError(f"expected {_TYPE_NAMES[tp]}, got {_describe(value)}")
        return value

    return hook


def _describe(value: Any) -> str:
    match value:
        case bool():
            return "a boolean"
        case str():
            return f"the string {value!r}"
        case int() | float():
            return f"the number {value!r}"
        case list():
            return "an array"
        case dict():
            return "a table"
    return type(value).__name__


def _origin(origin: Any) -> Callable[[Any], bool]:
    def predicate(tp: Any) -> bool:
        found: Any = get_origin(tp)
        return bool(found is origin)

    return predicate


def _converter(base: Path) -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    for tp in (str, int, float, bool):
        conv.register_structure_hook(tp, _strict(tp))

    def path_hook(value: Any, _: Any) -> Path:
        if not isinstance(value, str) or not value:
            raise ValueError(f"expected a path string, got {_describe(value)}")
        # Relative paths are relative to the config file, not to wherever it was read from.
        return base / Path(value).expanduser()

    conv.register_structure_hook(Path, path_hook)

    def literal_factory(tp: Any) -> Callable[[Any, Any], Any]:
        allowed = get_args(tp)

        def hook(value: Any, _: Any) -> Any:
            if value not in allowed:
                choices = ", ".join(repr(a) for a in allowed)
                raise ValueError(f"must be one of {choices}, got {value!r}")
            return value

        return hook

    conv.register_structure_hook_factory(_origin(Literal), literal_factory)

    def list_factory(tp: Any) -> Callable[[Any, Any], Any]:
        (item,) = get_args(tp)
        item_hook = conv.get_structure_hook(item)

        def hook(value: Any, _: Any) -> list[Any]:
            if not isinstance(value, list):
                raise ValueError(f"expected an array, got {_describe(value)}")
            out: list[Any] = []
            for idx, v in enumerate(value):
                try:
                    out.append(item_hook(v, item))
                except ValueError as exc:
                    raise _AtIndex(idx, str(exc)) from None
            return out

        return hook

    conv.register_structure_hook_factory(_origin(list), list_factory)

    def dict_factory(tp: Any) -> Callable[[Any, Any], Any]:
        def hook(value: Any, _: Any) -> dict[str, str]:
            if not isinstance(value, dict):
                raise ValueError(f"expected a table, got {_describe(value)}")
            bad = [k for k, v in value.items() if not isinstance(v, str)]
            if bad:
                raise ValueError(f"values must be strings ({', '.join(sorted(bad))})")
            return dict(value)

        return hook

    conv.register_structure_hook_factory(_origin(dict), dict_factory)

    def class_factory(cl: Any) -> Callable[[Any, Any], Any]:
        inner = make_dict_structure_fn(
            cl, conv, _cattrs_forbid_extra_keys=True, _cattrs_detailed_validation=True
        )

        def hook(value: Any, tp: Any) -> Any:
            if not isinstance(value, Mapping):
                raise ValueError(f"expected a table, got {_describe(value)}")
            return inner(value, tp)

        return hook

    conv.register_structure_hook_factory(attrs.has, class_factory)
    return conv


class _AtIndex(ValueError):
    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index


def _problems(exc: BaseException, path: str) -> list[str]:
    """Flattens cattrs' exception tree into ``key.path: what was wrong`` lines."""
    if isinstance(exc, _AtIndex):
        return [f"{path}[{exc.index}]: {exc}"]
    if isinstance(exc, ForbiddenExtraKeysError):
        return [f"{_join(path, k)}: unknown key" for k in sorted(exc.extra_fields)]
    if isinstance(exc, ClassValidationError):
        noted, other = exc.group_exceptions()
        out = [p for sub, note in noted for p in _problems(sub, _join(path, note.name))]
        return out + [p for sub in other for p in _problems(sub, path)]
    if isinstance(exc, IterableValidationError):
        inoted, iother = exc.group_exceptions()
        out = [p for sub, inote in inoted for p in _problems(sub, f"{path}[{inote.index}]")]
        return out + [p for sub in iother for p in _problems(sub, path)]
    return [f"{path or '(top level)'}: {exc}"]


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _validate(cfg: Config) -> list[str]:
    """Checks between values that types alone cannot say."""
    d = cfg.daemon
    out: list[str] = []
    if not 0 <= d.api_port <= 65535:
        out.append(f"daemon.api_port: must be 0..65535, got {d.api_port}")
    if not _is_loopback(d.api_host) and not d.api_allow_remote:
        out.append(
            f"daemon.api_host: {d.api_host!r} is not a loopback address; "
            "set daemon.api_allow_remote = true to bind it (the token is always required)"
        )
    if d.max_frame_bytes < 1024:
        out.append(f"daemon.max_frame_bytes: must be at least 1024, got {d.max_frame_bytes}")
    if d.subscription_buffer < 16:
        out.append(f"daemon.subscription_buffer: must be at least 16, got {d.subscription_buffer}")
    for key in ("api_max_connections", "api_max_unauthenticated"):
        if getattr(d, key) < 1:
            out.append(f"daemon.{key}: must be at least 1, got {getattr(d, key)}")
    for key in (
        "idle_timeout_s",
        "restart_period_s",
        "backoff_initial_s",
        "backoff_max_s",
        "api_auth_timeout_s",
        "stall_warning_s",
        "heartbeat_s",
    ):
        if getattr(d, key) <= 0:
            out.append(f"daemon.{key}: must be positive, got {getattr(d, key)}")
    for key in ("stall_timeout_s", "stop_drain_s", "reattach_grace_s"):
        if getattr(d, key) < 0:
            out.append(f"daemon.{key}: must be 0 (off) or positive, got {getattr(d, key)}")
    if 0 < d.stall_timeout_s < d.stall_warning_s:
        out.append(
            f"daemon.stall_timeout_s: {d.stall_timeout_s} is below "
            f"daemon.stall_warning_s ({d.stall_warning_s})"
        )
    if d.heartbeat_timeout_s <= d.heartbeat_s:
        out.append(
            f"daemon.heartbeat_timeout_s: {d.heartbeat_timeout_s} must exceed "
            f"daemon.heartbeat_s ({d.heartbeat_s})"
        )
    if d.max_delta_handoff_chars < 1000:
        got = d.max_delta_handoff_chars
        out.append(f"daemon.max_delta_handoff_chars: must be at least 1000, got {got}")
    if cfg.providers.codex.max_threads_per_process < 1:
        got_threads = cfg.providers.codex.max_threads_per_process
        out.append(
            f"providers.codex.max_threads_per_process: must be at least 1, got {got_threads}"
        )
    if d.restart_intensity < 1:
        out.append(f"daemon.restart_intensity: must be at least 1, got {d.restart_intensity}")
    if d.backoff_initial_s > d.backoff_max_s:
        out.append(
            f"daemon.backoff_initial_s: {d.backoff_initial_s} is above "
            f"daemon.backoff_max_s ({d.backoff_max_s})"
        )
    if cfg.store.url is not None and (problem := store_url_problem(cfg.store.url)):
        out.append(f"store.url: {problem}")
    for name in ("codex", "claude", "standin"):
        command = getattr(cfg.providers, name).command
        if command is not None and (not command or not command[0]):
            out.append(f"providers.{name}.command: must name a program (an empty array)")
    return out


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_config(data: Mapping[str, Any], *, base: Path | None = None) -> Config:
    """Structures an already-parsed TOML document; raises ConfigError listing every problem."""
    conv = _converter(base or Path.cwd())
    try:
        cfg = conv.structure(dict(data), Config)
    except (ClassValidationError, ValueError) as exc:
        raise ConfigError("; ".join(_problems(exc, ""))) from None
    problems = _validate(cfg)
    if problems:
        raise ConfigError("; ".join(problems))
    return cfg


def load_config(path: str | Path | None) -> Config:
    """Reads the TOML file at ``path``; ``None`` gives the defaults."""
    if path is None:
        return Config()
    file = Path(path).expanduser()
    try:
        with file.open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config {file}: no such file") from None
    except OSError as exc:
        raise ConfigError(f"config {file}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config {file}: not valid TOML: {exc}") from None
    try:
        return parse_config(data, base=file.absolute().parent)
    except ConfigError as exc:
        raise ConfigError(f"config {file}: {exc}") from None
