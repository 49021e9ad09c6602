"""The operating-system sandbox a plugin's process runs in (SPEC §17, docs/plugins.md).

Nothing here trusts code running beside the plugin: every wall is the kernel's, set up before the plugin's
interpreter starts and so before any byte of the plugin (a module, a `.pth` file, a `sitecustomize`) is read.
bubblewrap (`bwrap`, Flatpak's sandbox) makes the namespaces and the filesystem; libseccomp compiles the system
call filter, which bwrap loads before it starts the command; util-linux's `setpriv` and `prlimit` change the
user and set the limits, still before Python starts.

- Namespaces: PID, IPC, UTS, cgroup, mount and network (the network namespace is empty: nothing outside it,
  no Oaken server, can be reached over TCP, UDP or a unix socket); as an unprivileged Oaken, a user namespace.
- Filesystem: a new root holding, read-only, the system's libraries (/usr), the Python installation the plugin
  environment was made from, the plugin environment, the project folders its editable installs point at (none
  that is or holds Oaken's code, working folder or data folder: a package writes its own metadata) and the
  plugin's own package folder; a fresh /proc of its own PID namespace; a minimal /dev; a small private /tmp.
  No data folder, no home, no Oaken source, no other process.
- User: as root, Oaken starts bwrap itself and `setpriv` drops to a uid of this sandbox's own (no capability
  left, no_new_privs); as another user, bwrap maps uid 65534 in a user namespace, with no capability.
- seccomp: refuses creating sockets (a pair of connected unix sockets excepted: asyncio's loop needs one),
  new processes (clone without CLONE_THREAD, fork, vfork; clone3 answers ENOSYS so threads fall back to clone),
  namespaces, ptrace and process_vm_*, pidfd_*, mknod, mount and the new mount calls, bpf, perf_event_open,
  keyctl, io_uring, userfaultfd, the kernel log, module and kexec calls, memory outside the address space
  (System V shared memory and message queues, memfd), and inotify and dnotify; a file lock is pretended (the
  files it shares with other sandboxes would carry messages between tenants). Another architecture's calls
  kill.
- Limits (prlimit): address space, threads, open files, file size, core dumps, CPU seconds of its life. The
  bridge adds the CPU seconds of each call and the size of each answer, and stops an idle process.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import logging
import os
import select
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("oaken.plugins")

BWRAP, NONE = "bwrap", "none"
MODES = (BWRAP, NONE)
# what a plugin's process keeps of Oaken's environment: nothing that names a server or holds a secret
_KEPT_ENVIRONMENT = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")
_NOBODY = 65534
# as root, each sandbox gets a uid of its own above this one (the thread limit is counted per uid)
_UID_BASE = 1 << 30
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
_SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/localtime")
# Oaken's own code (its checkout, or the site-packages it is installed in): never mounted, nor a folder above it
_OAKEN = Path(__file__).resolve().parent.parent.parent
_PROJECT_FILES = ("pyproject.toml", "setup.py", "setup.cfg")  # what makes a folder a project an install points at
_CLONE_THREAD = 0x00010000
_AF_UNIX = 1
_PR_SET_PDEATHSIG = 1
# refused with EPERM (a name this architecture lacks is skipped)
_REFUSED_CALLS = (
    "socket",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "pidfd_open",
    "pidfd_getfd",
    "pidfd_send_signal",
    "fork",
    "vfork",
    "unshare",
    "setns",
    "mknod",
    "mknodat",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "userfaultfd",
    "syslog",
    "open_by_handle_at",
    "name_to_handle_at",
    "fanotify_init",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "iopl",
    "ioperm",
    "acct",
    "swapon",
    "swapoff",
    "reboot",
    "quotactl",
    "lookup_dcookie",
    "uselib",
    "personality",
    # memory the address-space limit does not count: System V segments and message queues keep their pages
    # once detached, a memfd file its own (PLUGIN_FILE_MAX_MB each, as many as it may open)
    "shmget",
    "msgget",
    "memfd_create",
    # notice of what other processes open or change: on the files every sandbox shares, a message from another
    # tenant's process
    "inotify_init",
    "inotify_init1",
)
# fcntl's commands that lock (F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW) and flock: a lock on a file every
# sandbox shares read-only is seen by another sandbox's process, another tenant's (F_GETLK reports the offset of
# the lock in its way: any number), so a lock is pretended: the call succeeds and locks nothing. A process alone
# with its files has no one else to keep out (sqlite in its /tmp still works).
_LOCK_COMMANDS = (6, 7, 37, 38)
_F_NOTIFY = 1026  # dnotify: a signal when a file of a folder is opened (refused)


class SandboxUnavailable(Exception):
    """The sandbox cannot be made here; the reason is Oaken's own words (and bwrap's, never a plugin's)."""


@dataclass(frozen=True)
class Limits:
    memory_mb: int  # address space
    tasks: int  # threads (processes are refused outright)
    files: int  # open files
    file_mb: int  # the largest file it may write, and the size of its /tmp
    cpu_seconds: int  # CPU seconds of the process's whole life (the bridge retires it at half of them)


@dataclass(frozen=True)
class Environment:
    """Where plugins are installed: a Python environment of their own (a venv, never Oaken's), and folders of
    installed packages beside it (OAKEN_PLUGIN_PATH)."""

    root: Path
    python: Path
    base: Path  # the Python installation the environment was made from
    site_packages: Path
    paths: tuple[Path, ...] = ()
    sources: tuple[Path, ...] = field(default=())  # folders editable installs point at

    @classmethod
    def at(cls, root: Path, paths: Iterable[Path] = (), private: Iterable[Path] = ()) -> Environment:
        """The environment at `root`; SandboxUnavailable when there is none. No folder of `private` (the data
        folder) is ever mounted, nor any folder in or above it."""
        root = root.absolute()
        config = root / "pyvenv.cfg"
        python = root / "bin" / "python"
        found = sorted((root / "lib").glob("python3*/site-packages")) if (root / "lib").is_dir() else []
        if not config.is_file() or not python.exists() or not found:
            raise SandboxUnavailable(f"there is no plugin environment at {root} (make creates it)")
        home = ""
        for line in config.read_text(errors="replace").splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home":
                home = value.strip()
        base = Path(home).parent if home else Path(os.path.realpath(python)).parent.parent
        folders = tuple(Path(p).absolute() for p in paths)
        kept = (_OAKEN, _working_folder(), root)
        return cls(root, python, base, found[0], folders, _editable_sources(found[0], kept, tuple(private)))


def _working_folder() -> Path:
    try:
        return Path.cwd()
    except OSError:  # removed since: nothing there to keep out
        return _OAKEN


def _editable_sources(site_dir: Path, kept: Iterable[Path], private: Iterable[Path]) -> tuple[Path, ...]:
    """The project folders that editable installs in the plugin environment point at (PEP 610's direct_url.json):
    every sandbox mounts them. A package writes its own direct_url.json (pip keeps the one a wheel ships), so a
    folder is taken only when it holds a Python project, resolved first (/proc/self/cwd names Oaken's working
    folder), and never when it is or holds Oaken's code, working folder or plugin environment (`kept`), nor is,
    holds or lies in a `private` folder. Folders of OAKEN_PLUGIN_PATH (`pip install --target`) are not read."""
    kept = [Path(os.path.realpath(p)) for p in kept]
    private = [Path(os.path.realpath(p)) for p in private]
    sources = set()
    for record in site_dir.glob("*.dist-info/direct_url.json"):
        try:
            data = json.loads(record.read_text())
        except (OSError, ValueError):
            continue
        url = data.get("url") if isinstance(data, dict) else None
        editable = (
            isinstance(data, dict) and isinstance(data.get("dir_info"), dict) and data["dir_info"].get("editable")
        )
        if not (editable and isinstance(url, str) and url.startswith("file:///")):
            continue
        folder = Path(os.path.realpath(url.removeprefix("file://")))
        if not folder.is_dir() or not any((folder / name).is_file() for name in _PROJECT_FILES):
            continue
        if any(folder == k or folder in k.parents for k in kept) or any(
            folder == p or folder in p.parents or p in folder.parents for p in private
        ):
            log.warning("%s, named by an editable install, is not mounted for plugins: it is or holds Oaken's", folder)
            continue
        sources.add(folder)
    return tuple(sorted(sources))


# ---------------------------------------------------------------- seccomp

_program: bytes | None = None
_program_lock = threading.Lock()


def seccomp_program() -> bytes:
    """The filter as a BPF program for bwrap's --seccomp, compiled once per process by libseccomp."""
    global _program
    with _program_lock:
        if _program is None:
            _program = _compile()
        return _program


def _compile() -> bytes:
    try:
        import pyseccomp as seccomp
    except (ImportError, OSError) as missing:  # the binding loads libseccomp.so.2 when it is imported
        raise SandboxUnavailable("libseccomp is not installed (bin/system-packages installs libseccomp2)") from missing
    refuse = seccomp.ERRNO(errno.EPERM)
    program = seccomp.SyscallFilter(seccomp.ALLOW)
    for name in _REFUSED_CALLS:
        try:
            program.add_rule(refuse, name)
        except (OSError, ValueError):
            continue  # not a call of this architecture
    # threads only: a clone that would make a process is refused; clone3 is refused as unknown, so that the C
    # library falls back to clone, whose flags the filter can read
    program.add_rule(refuse, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, _CLONE_THREAD, 0))
    program.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    program.add_rule(refuse, "socketpair", seccomp.Arg(0, seccomp.NE, _AF_UNIX))
    pretend = seccomp.ERRNO(0)
    program.add_rule(pretend, "flock")
    for command in _LOCK_COMMANDS:
        program.add_rule(pretend, "fcntl", seccomp.Arg(1, seccomp.EQ, command))
    program.add_rule(refuse, "fcntl", seccomp.Arg(1, seccomp.EQ, _F_NOTIFY))
    reader, writer = os.pipe()
    try:
        with os.fdopen(writer, "wb", closefd=True) as out:
            program.export_bpf(out)
        return _read_all(reader)
    finally:
        os.close(reader)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _memfd(data: bytes) -> int:
    fd = os.memfd_create("oaken-seccomp", os.MFD_CLOEXEC)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


# ---------------------------------------------------------------- the command


_uid_lock = threading.Lock()
_uid_count = 0


def _sandbox_uid() -> int:
    """A uid no other live sandbox has: this process's id and a count (an Oaken process keeps far fewer than
    256 sandboxes, and its sandboxes end with it)."""
    global _uid_count
    with _uid_lock:
        _uid_count = (_uid_count + 1) % 256
        return _UID_BASE + ((os.getpid() & 0x3FFFFF) << 8) + _uid_count


def _limits(limits: Limits) -> list[str]:
    memory = limits.memory_mb * 1024 * 1024
    size = limits.file_mb * 1024 * 1024
    return [
        "prlimit",
        f"--as={memory}:{memory}",
        f"--nproc={limits.tasks}:{limits.tasks}",
        f"--nofile={limits.files}:{limits.files}",
        f"--fsize={size}:{size}",
        f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds}",
        "--core=0:0",
        "--",
    ]


def _mounts(places: Sequence[Path], limits: Limits) -> list[str]:
    """bwrap's arguments for the new root: system folders as they are (a symlink stays one), then each place
    read-only, every folder above it made first, searchable by anyone (bwrap would make them 0700)."""
    args: list[str] = []
    for name in _SYSTEM_DIRS:
        path = Path(name)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), name]
        elif path.is_dir():
            args += ["--ro-bind", name, name]
    files = [name for name in _SYSTEM_FILES if Path(name).exists()]
    if files:
        args += ["--perms", "0755", "--dir", "/etc"]  # bwrap would make it 0700: the files in it unreadable
    for name in files:
        args += ["--ro-bind", name, name]
    # its own /proc, /dev and /tmp first: a place under /tmp (a test's folder) is then bound on top of the new one
    size = limits.file_mb * 1024 * 1024
    args += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(size), "--tmpfs", "/tmp"]  # noqa: S108
    made: set[Path] = {Path("/"), Path("/tmp")}  # noqa: S108 - the sandbox's own
    kept: list[Path] = []
    for place in sorted({Path(os.path.realpath(p)) for p in places}, key=lambda p: (len(p.parts), str(p))):
        if any(place == k or k in place.parents for k in kept) or not place.exists():
            continue  # already inside a folder bound before it
        if any(place == Path(s) or Path(s) in place.parents for s in _SYSTEM_DIRS):
            continue
        for folder in reversed(place.parents):
            if folder not in made:
                args += ["--perms", "0755", "--dir", str(folder)]
                made.add(folder)
        args += ["--ro-bind", str(place), str(place)]
        kept.append(place)
    return args


def environment_variables() -> dict[str, str]:
    kept = {key: os.environ[key] for key in _KEPT_ENVIRONMENT if key in os.environ}
    # glibc keeps an arena of address space per thread: two keep the address-space limit about memory
    kept.update(HOME="/nonexistent", PYTHONIOENCODING="utf-8", MALLOC_ARENA_MAX="2")
    return kept


def _command(
    env: Environment, places: Sequence[Path], limits: Limits, args: Sequence[str], *, fds: tuple[int, int]
) -> list[str]:
    seccomp_fd, info_fd = fds
    root = os.geteuid() == 0
    command = ["bwrap", "--die-with-parent", "--new-session", "--chdir", "/"]
    if root:
        # bwrap, as root, makes the namespaces and the mounts; setpriv then leaves root for a uid of this
        # sandbox's own before Python starts (a user namespace would map the sandbox to root outside)
        command += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup"]
        command += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        command += ["--unshare-all", "--unshare-user", "--disable-userns", "--uid", str(_NOBODY), "--gid", str(_NOBODY)]
        command += ["--cap-drop", "ALL"]
    command += _mounts([env.base, env.root, *env.sources, *places], limits)
    command += ["--seccomp", str(seccomp_fd), "--info-fd", str(info_fd)]
    if root:
        uid = str(_sandbox_uid())
        command += ["setpriv", f"--reuid={uid}", f"--regid={_NOBODY}", "--clear-groups"]
        command += ["--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
    return [*command, *_limits(limits), str(env.python), "-I", *args]


@dataclass
class Sandboxed:
    """A started process: `process` is what Oaken started (bwrap), `pid` the plugin's interpreter, `pidfd` a
    handle on that interpreter (signals sent through it can never reach another process that reused its pid)."""

    process: subprocess.Popen[bytes]
    pid: int
    pidfd: int

    def signal(self, number: int) -> None:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(self.pidfd, number)

    def end(self) -> None:
        """Kill the interpreter (and so its sandbox), reap what Oaken started, close the pipes and the handle."""
        self.signal(signal.SIGKILL)
        _end(self.process)
        with contextlib.suppress(OSError):
            os.close(self.pidfd)


# Processes are started from one thread that lives as long as this Oaken process: bwrap (and the `none` mode's
# process) die with the thread that started them (PR_SET_PDEATHSIG), and a request's or a health check's thread
# may end long before the process it started should.
_launcher: tuple[int, ThreadPoolExecutor] | None = None
_launcher_lock = threading.Lock()


def _launch(
    command: list[str], pass_fds: tuple[int, ...], preexec: Callable[[], None] | None
) -> subprocess.Popen[bytes]:
    global _launcher
    with _launcher_lock:
        if _launcher is None or _launcher[0] != os.getpid():
            _launcher = (os.getpid(), ThreadPoolExecutor(max_workers=1, thread_name_prefix="oaken-plugin-launcher"))
        launcher = _launcher[1]
    started = launcher.submit(
        subprocess.Popen,
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # what a plugin prints could quote mail
        env=environment_variables(),
        cwd="/",
        close_fds=True,
        pass_fds=pass_fds,
        start_new_session=True,
        preexec_fn=preexec,
    )
    return started.result()


def _die_with_parent() -> Callable[[], None]:
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def die() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

    return die


def spawn(
    mode: str, env: Environment, places: Sequence[Path], limits: Limits, args: Sequence[str], timeout: float
) -> Sandboxed:
    """Start `python -I <args>` of the plugin environment in the sandbox (in `none` mode: as it is, with the
    limits only). stdin and stdout are pipes; stderr is discarded."""
    if mode == NONE:
        process = _launch([*_limits(limits), str(env.python), "-I", *args], (), _die_with_parent())
        return Sandboxed(process, process.pid, os.pidfd_open(process.pid))
    seccomp_fd = _memfd(seccomp_program())
    info_read, info_write = os.pipe()
    try:
        process = _launch(
            _command(env, places, limits, args, fds=(seccomp_fd, info_write)), (seccomp_fd, info_write), None
        )
    finally:
        os.close(seccomp_fd)
        os.close(info_write)
    try:
        init = _child_pid(info_read, timeout)
    finally:
        os.close(info_read)
    # bwrap's own init is the PID namespace's first process (as root, with the death signal bwrap gave it): when
    # Oaken ends, bwrap ends, the init is killed, and the kernel ends every process of the namespace, a stopped
    # one too. (The interpreter as that first process would outlive bwrap: leaving root clears its death signal.)
    pid = _first_child(init, timeout) if init is not None else None
    pidfd = None
    if pid is not None:
        with contextlib.suppress(OSError):
            pidfd = os.pidfd_open(pid)
    if pid is None or pidfd is None:
        _end(process)
        raise SandboxUnavailable("bwrap did not start the sandbox")
    return Sandboxed(process, pid, pidfd)


def _first_child(parent: int, timeout: float) -> int | None:
    """The one process bwrap's init started (the plugin's interpreter), found as soon as it exists."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
        except FileNotFoundError:  # a kernel without CONFIG_PROC_CHILDREN: every process's parent, read
            import psutil

            try:
                children = [str(c.pid) for c in psutil.Process(parent).children()]
            except psutil.Error:
                return None
        except OSError:
            return None
        if children:
            return int(children[0])
        time.sleep(0.001)
    return None


def _child_pid(fd: int, timeout: float) -> int | None:
    """The sandboxed process's pid, from what bwrap writes on its info descriptor (then closes)."""
    data = b""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([fd], [], [], left)
        if not readable:
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
        if len(data) > 65536:
            return None
    try:
        pid = json.loads(data or b"{}").get("child-pid")
    except (ValueError, AttributeError):
        return None
    return pid if isinstance(pid, int) and pid > 0 else None


def _end(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait()
    for stream in (process.stdin, process.stdout):
        if stream is not None:
            stream.close()


# ---------------------------------------------------------------- can it be made here?

_checked: dict[tuple[str, Path], str | None] = {}
_checked_lock = threading.Lock()


def unavailable(mode: str, env: Environment) -> str | None:
    """Why plugins cannot be sandboxed here (None: they can), found once per process by starting a sandbox."""
    if mode == NONE:
        return None
    key = (mode, env.root)
    with _checked_lock:
        if key not in _checked:
            _checked[key] = _probe(env)
        return _checked[key]


def _probe(env: Environment) -> str | None:
    root = os.geteuid() == 0
    for tool in ("bwrap", "prlimit", *(("setpriv",) if root else ())):
        if shutil.which(tool) is None:
            package = "bubblewrap" if tool == "bwrap" else "util-linux"
            return f"{tool} is not installed (the {package} package; bin/system-packages installs it)"
    try:
        program = seccomp_program()
    except SandboxUnavailable as missing:
        return str(missing)
    limits = Limits(memory_mb=512, tasks=8, files=32, file_mb=1, cpu_seconds=10)
    seccomp_fd = _memfd(program)
    info_read, info_write = os.pipe()
    try:
        probe = subprocess.run(
            _command(env, [], limits, ["-c", "print('sandboxed')"], fds=(seccomp_fd, info_write)),
            capture_output=True,
            env=environment_variables(),
            cwd="/",
            pass_fds=(seccomp_fd, info_write),
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as failed:
        return f"bwrap could not be run ({type(failed).__name__})"
    finally:
        for fd in (seccomp_fd, info_read, info_write):
            os.close(fd)
    if probe.returncode != 0 or probe.stdout.strip() != b"sandboxed":
        said = probe.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no message"]
        return (
            f"bwrap could not make a sandbox here ({said[0][:200]}): it needs unprivileged user namespaces, or "
            "Oaken running as root (docs/plugins.md)"
        )
    return None
