"""What the daemon keeps of a repository between checkpoints, so that one costs little.

A checkpoint sits on a turn's critical path (the completion barrier, before the turn's
end commits). Spawning git for it cost about 30 ms a turn (seven processes, one of them
``git add -A`` into an empty index, which hashes every file again). Kept here, per
work tree:

* **the repository's facts**: its git dirs, and whether its objects and refs may be
  written in-process (SHA-1 objects, the files ref backend, no object-directory
  override): then a checkpoint's commit object and ref are written as git writes
  them (a zlib'd loose object; a ref through its ``.lock``), no process spawned;
* **a private index** in the git dir, kept between checkpoints, so ``git add -A``
  re-reads only files whose stat changed (and those whose change git's stat check, to
  the second, would miss: ``git_blind``);
* **a stat fingerprint** of the work tree (every file and directory, ignored ones
  too: mode, size, inode, mtime, ctime) taken before the last capture: an equal one
  means an unchanged tree, whose id is known, and nothing is run. A fingerprint with
  an entry changed within ``RACY_NS`` of its walk is not kept (a file's timestamps
  are coarse: a second write in the same tick would look the same), nor one of a
  tree with a nested repository or more than ``MAX_ENTRIES`` entries;
* the trees of the commits made here and the refs written here (their diff and
  their resolution need no git).

Anything unexpected drops the repository's facts; the next checkpoint runs git as
before.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import time
import zlib
from pathlib import Path

import attrs
import trio

#: Changed this recently (ns) before the walk: the entry could change again unseen
#: (a second write within one timestamp tick looks the same; ticks are up to 2 s on
#: some filesystems).
RACY_NS = 3_000_000_000
#: Larger trees are not fingerprinted (the walk would cost what git costs).
MAX_ENTRIES = 20_000
#: A tree this small is walked on the event loop (tens of µs): a worker thread's hop
#: there and back costs more (0.3-0.5 ms measured at a turn's end, under the GIL).
INLINE_ENTRIES = 256
IDENTITY = "t3orch <t3orch@localhost>"

Stat = tuple[int, int, int, int, int]


@attrs.frozen
class Fingerprint:
    entries: dict[str, Stat]
    #: Some entry changed within RACY_NS of the walk: not to be trusted later.
    racy: bool


@attrs.define(eq=False)
class Repo:
    root: str
    git_dir: Path
    common_dir: Path
    #: Objects and refs may be written in-process (see the module's doc).
    native: bool
    lock: trio.Lock = attrs.field(factory=trio.Lock)
    #: The fingerprint of the work tree whose tree is ``tree`` (None: not to be trusted).
    fingerprint: Fingerprint | None = None
    #: The last walk's, trusted or not: what the kept index's stat data came after.
    last_seen: Fingerprint | None = None
    tree: str | None = None
    #: Commit -> tree, of the commits made here.
    trees: dict[str, str] = attrs.field(factory=dict)
    #: Ref -> commit, of the refs written here.
    refs: dict[str, str] = attrs.field(factory=dict)

    @property
    def index(self) -> Path:
        return self.git_dir / "t3orch-checkpoint.index"


_repos: dict[str, Repo] = {}
#: cwd -> the root of the work tree holding it.
roots: dict[str, str] = {}


def known(root: str) -> Repo | None:
    return _repos.get(root)


def remember(repo: Repo) -> None:
    _repos[repo.root] = repo


def forget(root: str) -> None:
    _repos.pop(root, None)
    for cwd in [c for c, r in roots.items() if r == root]:
        del roots[cwd]


def probe(root: str, out: str) -> Repo:
    """The repository from ``git rev-parse --git-dir --git-common-dir --show-object-format``."""
    git_dir, common, fmt = out.split("\n")[:3]
    gd = Path(root, git_dir).resolve()
    cd = Path(root, common).resolve()
    native = (
        fmt.strip() == "sha1"
        and not (cd / "reftable").exists()
        and "GIT_OBJECT_DIRECTORY" not in os.environ
        and (cd / "objects").is_dir()
    )
    return Repo(root, gd, cd, native)


class TooLarge(Exception):
    """The walk found more than its ``limit`` of entries."""


def fingerprint(root: str, limit: int | None = None) -> Fingerprint | None:
    """The work tree's entries' stat, or None when it is not to be fingerprinted.

    ``limit``: raise :class:`TooLarge` past this many entries (a walk meant to be short).
    """
    entries: dict[str, Stat] = {}
    newest = 0
    pending = [""]
    while pending:
        rel = pending.pop()
        with os.scandir(os.path.join(root, rel) if rel else root) as it:
            for entry in it:
                if entry.name == ".git":
                    if rel:
                        return None  # a nested repository: its state is not in the stat
                    continue
                st = entry.stat(follow_symlinks=False)
                path = f"{rel}/{entry.name}" if rel else entry.name
                entries[path] = (st.st_mode, st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
                newest = max(newest, st.st_mtime_ns, st.st_ctime_ns)
                if stat.S_ISDIR(st.st_mode):
                    pending.append(path)
                if len(entries) > MAX_ENTRIES:
                    return None
                if limit is not None and len(entries) > limit:
                    raise TooLarge(root)
    st = os.stat(root)
    entries["."] = (st.st_mode, st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
    newest = max(newest, st.st_mtime_ns, st.st_ctime_ns)
    return Fingerprint(entries, newest >= time.time_ns() - RACY_NS)


def git_blind(before: Fingerprint | None, now: Fingerprint | None) -> list[str]:
    """Files changed between two fingerprints in a way git's index may not see: the same
    size, mtime and ctime to the second (git compares them so when built without
    nanosecond stat), e.g. a rewrite whose mtime was put back. They leave the kept
    index before ``git add``, so they are read again."""
    if before is None or now is None:
        return []
    out = []
    for path, (mode, size, ino, mtime, ctime) in now.entries.items():
        old = before.entries.get(path)
        if old is None or old == (mode, size, ino, mtime, ctime) or stat.S_ISDIR(mode):
            continue
        if (old[0], old[1], old[2], old[3] // 10**9, old[4] // 10**9) == (
            mode,
            size,
            ino,
            mtime // 10**9,
            ctime // 10**9,
        ):
            out.append(path)
    return out


def write_commit(repo: Repo, tree: str, parent: str | None, message: str) -> str:
    """The commit object ``git commit-tree`` would write, as a loose object; its id."""
    now = int(time.time())
    head = f"tree {tree}\n" + (f"parent {parent}\n" if parent else "")
    body = (
        f"{head}author {IDENTITY} {now} +0000\ncommitter {IDENTITY} {now} +0000\n\n{message}\n"
    ).encode()
    raw = b"commit %d\0" % len(body) + body
    sha = hashlib.sha1(raw).hexdigest()
    path = repo.common_dir / "objects" / sha[:2] / sha[2:]
    if not path.exists():
        tmp = path.parent / f"tmp_obj_t3_{os.getpid()}_{sha[2:10]}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        except FileNotFoundError:  # the fan-out directory's first object
            path.parent.mkdir(exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        try:
            os.write(fd, zlib.compress(raw))
        finally:
            os.close(fd)
        os.replace(tmp, path)
    repo.trees[sha] = tree
    return sha


def write_ref(repo: Repo, ref: str, commit: str) -> None:
    """``git update-ref ref commit`` for a new loose ref, through git's lock file."""
    path = repo.common_dir / ref
    lock = path.with_name(path.name + ".lock")
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileNotFoundError:  # the thread's first ref: its directory (one mkdir fewer)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        try:
            os.write(fd, f"{commit}\n".encode())
        finally:
            os.close(fd)
        os.replace(lock, path)
    except BaseException:
        # Left behind, our lock would refuse git's own update-ref (the fallback).
        with contextlib.suppress(OSError):
            os.unlink(lock)
        raise
    repo.refs[ref] = commit


__all__ = [
    "Fingerprint",
    "Repo",
    "fingerprint",
    "forget",
    "known",
    "probe",
    "remember",
    "roots",
    "write_commit",
    "write_ref",
]
