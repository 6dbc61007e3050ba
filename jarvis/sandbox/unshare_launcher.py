"""isolation = "namespaces": build a sandbox with the kernel calls directly (no bubblewrap).

Run as a script (standard library only): `python -I -S unshare_launcher.py '<spec json>'`.
It creates user, mount, PID, IPC, UTS, cgroup (and, without network, net) namespaces with
unshare(2), maps the caller to an unprivileged uid/gid, forks the namespace's init, and there
mounts a fresh tmpfs root holding only the mount plan (read-only binds, the work tmpfs, a new
/proc, a minimal /dev), pivot_roots into it, drops every capability and execs the worker. Then it reports the
init's host pid on the info fd (like bwrap's --info-fd) and waits for it. Both die with their
parent (PR_SET_PDEATHSIG); killing the init kills everything in the namespace.

Run as root, it first becomes the unprivileged host uid of the spec's "drop" (see
SandboxPolicy.uid): the kernel never applies RLIMIT_NPROC to root. `blocked_folders`, `stage`
and `drop` also serve bubblewrap, in the child jarvis forks before it execs bwrap.
"""

import _json
import ctypes
import errno
import os
import sys

CLONE_NEWNS, CLONE_NEWCGROUP = 0x00020000, 0x02000000
CLONE_NEWUTS, CLONE_NEWIPC = 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP = 1, 4, 24
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
SIGKILL = 9
# /dev: these devices and links, nothing else (no terminal: see launch.dev_args).
DEVICES = ("null", "zero", "full", "random", "urandom")
DEV_LINKS = (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
             ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2"))

libc = ctypes.CDLL(None, use_errno=True)


class _Decoding:
    """What _json's scanner asks of json.JSONDecoder: the json package (it imports re) costs
    every sandbox start of this launcher milliseconds (a script runs with few imports)."""

    strict = True
    object_hook = object_pairs_hook = None
    parse_float, parse_int = float, int

    @staticmethod
    def parse_constant(name: str) -> float:
        raise ValueError(f"JSON constant {name}")


def loads(text: str):
    value, end = _json.make_scanner(_Decoding())(text, 0)
    if text[end:].strip():
        raise ValueError("extra data after the JSON value")
    return value


def _unescape(field: str) -> str:
    """A mountinfo field with its \\ooo escapes (space, tab, newline, backslash) undone."""
    parts = field.split("\\")
    out = [parts[0]]
    for part in parts[1:]:
        if len(part) >= 3 and all(c in "01234567" for c in part[:3]):
            out.append(chr(int(part[:3], 8)) + part[3:])
        else:
            out.append("\\" + part)
    return "".join(out)


def check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _enc(value):
    return value.encode() if isinstance(value, str) else value


def mount(src, dst, fstype, flags, data=None) -> None:
    enc = _enc
    check(libc.mount(enc(src), enc(dst), enc(fstype), ctypes.c_ulong(flags), enc(data)),
          f"mount {src} on {dst}")


def locked_flags(path: str) -> int:
    """The flags a bind remount inside a user namespace must keep (the kernel locks them)."""
    f = os.statvfs(path).f_flag
    flags = 0
    for st, ms in ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC),
                   (os.ST_NOATIME, MS_NOATIME), (os.ST_NODIRATIME, MS_NODIRATIME),
                   (getattr(os, "ST_RELATIME", 4096), MS_RELATIME)):
        if f & st:
            flags |= ms
    return flags


def bind(src: str, target: str, read_only: bool) -> None:
    if os.path.isdir(src):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    mount(src, target, None, MS_BIND | MS_REC)
    if read_only:
        # Every mount in the tree, not only its top: a remount is not recursive, and a mount
        # below a read-only path (a separate /usr/local, a data disk) stayed writable.
        for point in [target, *mounts_below(target)]:
            mount(None, point, None, MS_BIND | MS_REMOUNT | MS_RDONLY | locked_flags(point))


def mounts_below(folder: str) -> list:
    """Mount points strictly inside `folder`, parents first (from /proc/self/mountinfo)."""
    found = []
    with open("/proc/self/mountinfo", "rb") as f:
        for line in f:
            # Field 5 is the mount point, with space, tab, newline and backslash as \ooo.
            point = line.split()[4].decode("utf-8", "surrogateescape")
            point = _unescape(point)
            if point.startswith(folder.rstrip("/") + "/"):
                found.append(point)
    return found


def _passable(path: str, uid: int, gid: int) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return True  # nothing to stage: mounting the path fails, and says so
    if st.st_uid == uid:
        return bool(st.st_mode & 0o100)
    if st.st_gid == gid:
        return bool(st.st_mode & 0o010)
    return bool(st.st_mode & 0o001)


def blocked_folders(sources: list, uid: int, gid: int) -> dict:
    """For each source to mount, the highest folder on its way that uid/gid cannot pass
    through (jarvis's interpreter under /root, mode 0700): {folder: [sources below it]}."""
    found: dict = {}
    for source in sources:
        path = ""
        for part in source.strip("/").split("/")[:-1]:
            path += "/" + part
            if not _passable(path, uid, gid):
                found.setdefault(path, []).append(source)
                break
    return found


def stage(blocked: dict) -> None:
    """Still root, in a private mount namespace (gone with the sandbox): an empty tmpfs over
    each blocked folder, with only the sources below it bound back at their own paths. The
    unprivileged uid then reaches them, and nothing else of the folder."""
    check(libc.unshare(CLONE_NEWNS), "unshare mount namespace")
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    for folder, sources in blocked.items():
        fds = [os.open(source, os.O_PATH | os.O_CLOEXEC) for source in sources]
        mount("tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k")
        for fd, source in zip(fds, sources, strict=True):
            os.makedirs(os.path.dirname(source), mode=0o755, exist_ok=True)
            if os.path.isdir(f"/proc/self/fd/{fd}"):
                os.makedirs(source, mode=0o755, exist_ok=True)
            else:
                os.close(os.open(source, os.O_CREAT | os.O_WRONLY, 0o444))
            mount(f"/proc/self/fd/{fd}", source, None, MS_BIND | MS_REC)
            os.close(fd)


def drop(uid: int, gid: int) -> None:
    """Become uid/gid on the host, with no supplementary groups and no capabilities."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)


def build_root(spec: dict, root: str) -> None:
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    for kind, a, b in spec["ops"]:
        if kind in ("ro", "rw"):  # (kind, source, destination)
            bind(a, root + b, kind == "ro")
        elif kind == "symlink":  # (kind, link target, destination)
            os.makedirs(os.path.dirname(root + b), exist_ok=True)
            os.symlink(a, root + b)
        elif kind == "tmpfs":  # (kind, destination, size in bytes)
            os.makedirs(root + a, exist_ok=True)
            mount("tmpfs", root + a, "tmpfs", MS_NOSUID | MS_NODEV,
                  f"size={int(b)},nr_inodes={int(spec['tmp_files'])},mode=1777")
        elif kind == "hide":  # (kind, destination, 0)
            os.makedirs(root + a, exist_ok=True)
            mount("tmpfs", root + a, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k")
    os.makedirs(root + "/proc", exist_ok=True)
    # Read-only: the sandbox's uid is the caller's on the host; as root, without Landlock,
    # it could write host sysctls (kernel/core_pattern) through a writable /proc.
    mount("proc", root + "/proc", "proc", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.makedirs(root + "/dev", exist_ok=True)
    mount("tmpfs", root + "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k")
    for name in DEVICES:
        bind("/dev/" + name, f"{root}/dev/{name}", False)
    for name, target in DEV_LINKS:
        os.symlink(target, f"{root}/dev/{name}")
    old = root + "/.oldroot"
    os.makedirs(old, exist_ok=True)
    check(libc.syscall(SYS_PIVOT_ROOT[os.uname().machine], root.encode(), old.encode()),
          "pivot_root")
    os.chdir("/")
    check(libc.umount2(b"/.oldroot", MNT_DETACH), "umount old root")
    os.rmdir("/.oldroot")
    mount(None, "/", None, MS_BIND | MS_REMOUNT | MS_RDONLY | locked_flags("/"))


def loopback_up() -> None:
    """Bring up the new network namespace's loopback, as bubblewrap does: its own 127.0.0.1
    (where a sandboxed server's proxy listens, netproxy.py), reaching nothing outside.
    Best effort: code sandboxes need no loopback, and a server's proxy fails loudly without
    one. Through libc: a module imported here, after the launcher dropped to the sandbox uid,
    may sit in a folder that uid cannot read."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 1
    fd = libc.socket(2, 2, 0)  # AF_INET, SOCK_DGRAM
    if fd < 0:
        return
    try:
        request = ctypes.create_string_buffer(b"lo", 40)  # struct ifreq: name, then flags
        if libc.ioctl(fd, siocgifflags, request) == 0:
            flags = int.from_bytes(request.raw[16:18], "little") | iff_up
            request[16:18] = flags.to_bytes(2, "little")
            libc.ioctl(fd, siocsifflags, request)
    finally:
        os.close(fd)


def child(spec: dict, root: str) -> None:
    libc.prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)
    if not spec.get("network"):
        loopback_up()  # still holding every capability in the namespace
    build_root(spec, root)
    hostname = b"sandbox"
    libc.sethostname(hostname, len(hostname))
    os.chdir(spec["workdir"])
    for cap in range(64):  # no capability survives, not even in the sandbox's user namespace
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break
    argv = spec["argv"]
    os.execve(argv[0], argv, spec["env"])


def main() -> int:
    spec = loads(sys.argv[1])
    parent = os.getppid()
    libc.prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        return 1
    if spec.get("exec"):  # as bwrap_preexec, for a caller that cannot run one: stage, drop,
        host_uid, host_gid = spec["drop"]  # then exec bubblewrap (see command.py)
        blocked = blocked_folders(spec["sources"], host_uid, host_gid)
        if blocked:
            stage(blocked)
        drop(host_uid, host_gid)
        os.execv(spec["exec"][0], spec["exec"])
    info_fd = spec["info_fd"]
    if spec.get("drop"):
        host_uid, host_gid = spec["drop"]
        blocked = blocked_folders([a for kind, a, _ in spec["ops"] if kind in ("ro", "rw")],
                                  host_uid, host_gid)
        if blocked:
            stage(blocked)
        drop(host_uid, host_gid)
        # A new uid made this process non-dumpable (its /proc/self, uid_map included, would
        # stay root's) and cleared its death signal.
        libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        libc.prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            return 1
    uid, gid = os.getuid(), os.getgid()
    root = f"/tmp/jarvis-ns-{os.urandom(8).hex()}"  # the launcher's environment is empty
    os.mkdir(root, 0o700)
    # pivot_root moves this process into the new root too: keep a handle on the host folder
    # that holds the mount point, to remove it afterwards.
    host_tmp = os.open(os.path.dirname(root), os.O_RDONLY | os.O_DIRECTORY)
    try:
        # A cgroup namespace as bubblewrap's: the host's cgroup paths stay out of sight.
        flags = (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS
                 | CLONE_NEWCGROUP)
        if not spec.get("network"):
            flags |= CLONE_NEWNET
        check(libc.unshare(flags), "unshare")
        with open("/proc/self/setgroups", "w") as f:
            f.write("deny")
        with open("/proc/self/uid_map", "w") as f:
            f.write(f"{spec['uid']} {uid} 1")
        with open("/proc/self/gid_map", "w") as f:
            f.write(f"{spec['gid']} {gid} 1")
        exec_r, exec_w = os.pipe()  # both close-on-exec: EOF once the child has exec'd
        pid = os.fork()
        if pid == 0:
            if info_fd is not None:
                os.close(info_fd)
            os.close(exec_r)
            try:
                child(spec, root)
            except BaseException as exc:  # noqa: BLE001 - report, never run unsandboxed
                os.write(2, f"sandbox setup failed: {exc}\n".encode())
            os._exit(127)
        os.close(exec_w)
        os.read(exec_r, 1)
        os.close(exec_r)
        # The child runs in its own root now: the host's mount point is an empty folder.
        try:
            os.rmdir(os.path.basename(root), dir_fd=host_tmp)
        except OSError:
            pass
        # The worker owns the pipes now: without our copies, jarvis sees EOF when it dies.
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        if info_fd is not None:
            os.write(info_fd, b'{"child-pid": %d}' % pid)
            os.close(info_fd)
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status) & 0xFF
    finally:
        try:
            os.rmdir(os.path.basename(root), dir_fd=host_tmp)
        except OSError:
            pass
        os.close(host_tmp)


def run() -> int:
    try:
        return main()
    except OSError as exc:
        hint = {errno.ENOSPC: " (user namespaces are disabled here: user.max_user_namespaces)",
                errno.EPERM: " (unprivileged user namespaces are not allowed here)"}
        os.write(2, f"sandbox setup failed: {exc}{hint.get(exc.errno, '')}\n".encode())
        return 1


if __name__ == "__main__":
    # No interpreter shutdown (tens of ms under load): the sandbox's end waits for this exit.
    os._exit(run())
