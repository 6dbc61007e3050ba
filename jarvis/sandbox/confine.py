"""The limits, Landlock rules and seccomp filter a sandbox puts on itself (worker.py and
exec_shim.py import it, inside the sandbox; standard library only).

A sandboxed interpreter, before any user code runs (apply_limits):
  - sets rlimits: RLIMIT_AS (memory), RLIMIT_CPU hard cap for the session (jarvis moves the
    soft limit from outside before each call), RLIMIT_FSIZE, RLIMIT_NOFILE, RLIMIT_CORE, and
    (isolated) RLIMIT_NPROC for threads, checked to bind (never as the host's root);
  - restricts itself with Landlock (when the kernel has it and the sandbox is isolated): read
    and execute only the mounted interpreter paths, write only the work folder, no TCP bind
    or connect unless the policy gives the network (ABI >= 4), no signals or abstract unix
    sockets out of the sandbox (ABI >= 6);
  - sets no_new_privs and a seccomp filter that refuses new processes (fork, exec, clone of
    a non-thread, clone3) and the kernel's attack surface that code has no use for: ptrace,
    process_vm_*, pidfd_open/getfd/send_signal, process_madvise, rt_(tg)sigqueueinfo,
    kill/tgkill of any other process, setrlimit and prlimit64 that sets a limit or names
    another process, kcmp, userfaultfd, perf_event_open, bpf, io_uring_*, keyrings, every
    mount/namespace call, module/kexec/reboot/swap/acct/quotactl/syslog and file handles,
    memory RLIMIT_AS does not bound (memfd_create, SysV shared memory, message queues and
    semaphores), making itself dumpable again (it is not: no core dump helper runs on its
    memory), sockets of any family but IPv4, IPv6 and netlink (socketpair: AF_UNIX
    only), clearing PR_SET_PDEATHSIG, and the ways to make the kernel send a signal of the
    code's choosing later (timer_create, POSIX message queues, fcntl F_SETSIG): SIGCONT
    resumed an interpreter jarvis froze between calls, and a set-user-ID or set-group-ID
    bit in any mode it sets (chmod, open's O_CREAT, mknod; openat2 is ENOSYS);
  - and what the sandbox would share with the host's kernel (issue 23): quotas counted for
    the whole host or the host uid (io_setup, inotify, epoll, F_SETPIPE_SZ; RLIMIT_SIGPENDING
    is set low), leases (F_SETLEASE), socket buffers past the host's defaults (SO_SNDBUF,
    SO_RCVBUF and their FORCE forms), socketpairs but AF_UNIX streams, and a session or
    controlling terminal of its own (setsid, TIOCSCTTY); without the network also IP sockets
    but datagram ones (TCP, SCTP) and sendmsg/sendmmsg (SCM_RIGHTS). Record locks and flock()
    succeed and do nothing.

"""

import ctypes
import errno
import os
import resource
import sys

SIGPENDING = 16  # RLIMIT_SIGPENDING: queued signals of the whole sandbox (its user namespace)
_MACHINE = os.uname().machine

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


# --- Landlock --------------------------------------------------------------------------------
_LL_CREATE, _LL_ADD_RULE, _LL_RESTRICT = {"x86_64": (444, 445, 446),
                                          "aarch64": (444, 445, 446)}.get(_MACHINE,
                                                                          (0, 0, 0))
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1, 2, 4, 8
_FS_READ = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
_FS_TRUNCATE, _FS_IOCTL_DEV = 1 << 14, 1 << 15


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPort(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("port", ctypes.c_uint64)]


def landlock_abi() -> int:
    if not _LL_CREATE:
        return 0
    abi = _libc.syscall(_LL_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(int(abi), 0)


def apply_landlock(rules: dict) -> int:
    """Restrict this process (and its future threads) to the paths in `rules`; returns the
    ABI version in force (0: the kernel has no Landlock, nothing applied)."""
    abi = landlock_abi()
    if abi < 1:
        return 0
    handled = (1 << 13) - 1                      # ABI 1: the 13 basic file rights
    if abi >= 2:
        handled |= 1 << 13                       # REFER (rename/link across folders)
    if abi >= 3:
        handled |= _FS_TRUNCATE
    if abi >= 5:
        handled |= _FS_IOCTL_DEV
    attr = _RulesetAttr(handled, 0, 0)
    size = 8
    if abi >= 4:
        size = 16
        if not rules.get("network"):
            attr.net = 1 | 2                     # BIND_TCP | CONNECT_TCP, no rule allows any
    if abi >= 6:
        size = 24
        attr.scoped = 1 | 2                      # abstract unix sockets, signals
    ruleset = _libc.syscall(_LL_CREATE, ctypes.byref(attr), ctypes.c_size_t(size),
                            ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        dev = _FS_READ | _FS_WRITE_FILE | (handled & (_FS_TRUNCATE | _FS_IOCTL_DEV))
        for paths, allowed in ((rules.get("read", []), _FS_READ), (rules.get("write", []), handled),
                               ([rules["dev"]] if rules.get("dev") else [], dev)):
            for path in paths:
                try:
                    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue  # not mounted here: nothing to allow
                try:
                    mask = allowed
                    if not os.path.isdir(path):  # files take file rights only
                        mask &= _FS_EXECUTE | _FS_READ_FILE | _FS_WRITE_FILE | (
                            handled & (_FS_TRUNCATE | _FS_IOCTL_DEV))
                    rule = _PathBeneath(mask, fd)
                    if _libc.syscall(_LL_ADD_RULE, ruleset, 1, ctypes.byref(rule), 0) != 0:
                        raise OSError(ctypes.get_errno(), f"landlock_add_rule({path}) failed")
                finally:
                    os.close(fd)
        if attr.net:  # TCP connections to these ports only (a sandboxed server's proxy)
            for port in rules.get("connect_ports", ()):
                rule = _NetPort(2, port)                 # CONNECT_TCP
                if _libc.syscall(_LL_ADD_RULE, ruleset, 2, ctypes.byref(rule), 0) != 0:
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule(port {port}) failed")
        if _libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
            raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS failed")
        if _libc.syscall(_LL_RESTRICT, ruleset, 0) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)
    return abi


# --- seccomp -----------------------------------------------------------------------------------
_DENIED = ("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_open", "pidfd_getfd",
           "pidfd_send_signal", "process_madvise", "process_mrelease", "rt_sigqueueinfo",
           "rt_tgsigqueueinfo", "tkill", "kcmp", "userfaultfd", "perf_event_open", "bpf",
           "io_uring_setup", "io_uring_enter", "io_uring_register", "add_key", "request_key",
           "keyctl", "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "open_tree",
           "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
           "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
           "reboot", "swapon", "swapoff", "acct", "quotactl", "syslog", "name_to_handle_at",
           "open_by_handle_at", "personality", "setrlimit", "execve", "execveat", "iopl",
           "ioperm", "modify_ldt", "uselib", "vhangup", "lookup_dcookie", "fanotify_init",
           # Memory RLIMIT_AS does not count (shmem written without a mapping, or mapped and
           # unmapped again): each would balloon past memory_mb to the host's whole RAM.
           "memfd_create", "memfd_secret", "shmget", "shmat", "shmctl", "shmdt", "msgget",
           "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semctl", "semtimedop",
           # A signal the kernel sends later, of the code's choosing: a POSIX timer (or a
           # message queue's notification) sending SIGCONT resumed a repl that jarvis had
           # frozen between calls, and a thread burned CPU until the next call. fcntl's
           # F_SETSIG (the same for I/O readiness, dnotify and leases) is checked below.
           "timer_create", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive",
           "mq_notify", "mq_getsetattr",
           # Quotas the kernel counts for the whole host (fs.aio-max-nr: two io_setup calls
           # took it all) or for the host uid, which as a normal user is the person's own:
           # inotify instances, epoll watches (Python's selectors fall back to poll).
           "io_setup", "inotify_init", "inotify_init1", "epoll_create", "epoll_create1",
           # No session of its own: a terminal it made its controlling one (with bubblewrap's
           # /dev/ptmx) sent SIGCONT to the frozen interpreter when it hung up later.
           "setsid")
# Syscall numbers: (x86_64, aarch64); None where the architecture has no such call. Those
# from fork on are checked with their arguments in _seccomp_program.
_SYSCALLS = {"ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
             "pidfd_open": (434, 434), "pidfd_getfd": (438, 438), "pidfd_send_signal": (424, 424),
             "process_madvise": (440, 440), "process_mrelease": (448, 448),
             "rt_sigqueueinfo": (129, 138), "rt_tgsigqueueinfo": (297, 240), "tkill": (200, 130),
             "kcmp": (312, 272), "userfaultfd": (323, 282), "perf_event_open": (298, 241),
             "bpf": (321, 280), "io_uring_setup": (425, 425), "io_uring_enter": (426, 426),
             "io_uring_register": (427, 427), "add_key": (248, 217), "request_key": (249, 218),
             "keyctl": (250, 219), "mount": (165, 40), "umount2": (166, 39),
             "pivot_root": (155, 41), "chroot": (161, 51), "unshare": (272, 97),
             "setns": (308, 268), "open_tree": (428, 428), "move_mount": (429, 429),
             "fsopen": (430, 430), "fsconfig": (431, 431), "fsmount": (432, 432),
             "fspick": (433, 433), "mount_setattr": (442, 442), "init_module": (175, 105),
             "finit_module": (313, 273), "delete_module": (176, 106), "kexec_load": (246, 104),
             "kexec_file_load": (320, 294), "reboot": (169, 142), "swapon": (167, 224),
             "swapoff": (168, 225), "acct": (163, 89), "quotactl": (179, 60), "syslog": (103, 116),
             "name_to_handle_at": (303, 264), "open_by_handle_at": (304, 265),
             "personality": (135, 92), "setrlimit": (160, 164), "execve": (59, 221),
             "execveat": (322, 281), "iopl": (172, None), "ioperm": (173, None),
             "modify_ldt": (154, None), "uselib": (134, None), "vhangup": (153, 58),
             "lookup_dcookie": (212, 18), "fanotify_init": (300, 262), "memfd_create": (319, 279),
             "memfd_secret": (447, 447), "shmget": (29, 194), "shmat": (30, 196),
             "shmctl": (31, 195), "shmdt": (67, 197), "msgget": (68, 186), "msgsnd": (69, 189),
             "msgrcv": (70, 188), "msgctl": (71, 187), "semget": (64, 190), "semop": (65, 193),
             "semctl": (66, 191), "semtimedop": (220, 192), "io_setup": (206, 0),
             "inotify_init": (253, None), "inotify_init1": (294, 26), "epoll_create": (213, None),
             "epoll_create1": (291, 20), "setsid": (112, 157), "timer_create": (222, 107),
             "mq_open": (240, 180), "mq_unlink": (241, 181), "mq_timedsend": (242, 182),
             "mq_timedreceive": (243, 183), "mq_notify": (244, 184), "mq_getsetattr": (245, 185),
             "fork": (57, None), "vfork": (58, None), "clone": (56, 220), "clone3": (435, 435),
             "kill": (62, 129), "tgkill": (234, 131), "prlimit64": (302, 261), "socket": (41, 198),
             "socketpair": (53, 199), "prctl": (157, 167), "fcntl": (72, 25), "chmod": (90, None),
             "fchmod": (91, 52), "fchmodat": (268, 53), "fchmodat2": (452, 452),
             "creat": (85, None), "mknod": (133, None), "mknodat": (259, 33), "open": (2, None),
             "openat": (257, 56), "openat2": (437, 437), "flock": (73, 32), "setsockopt": (54, 208),
             "ioctl": (16, 29), "sendmsg": (46, 211), "sendmmsg": (307, 269)}
_ARCHES = {"x86_64": (0xC000003E, 0), "aarch64": (0xC00000B7, 1)}
_LD_W_ABS, _JEQ, _JGE, _JSET, _RET, _AND = 0x20, 0x15, 0x35, 0x45, 0x06, 0x54
_FIRST_UNREVIEWED = 470  # x86_64/aarch64: file_setattr (469) is the newest reviewed
_ALLOW = 0x7FFF0000
_CLONE_THREAD = 0x00010000
_AF_UNIX, _AF_INET, _AF_INET6, _AF_NETLINK = 1, 2, 10, 16
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE = 1, 4
_F_SETSIG = 10
# fcntl commands: a lease (F_SETLEASE) made every other open of the file wait 45 s; a pipe
# grown past its 16 pages (F_SETPIPE_SZ) takes from the uid's fs.pipe-user-pages and is
# memory RLIMIT_AS does not count. Record locks (F_SETLK, F_SETLKW and the OFD ones): see
# _NOOP_LOCKS.
_F_SETLEASE, _F_SETPIPE_SZ = 1024, 1031
_LOCKS = (6, 7, 37, 38)
_SOCK_STREAM, _SOCK_DGRAM, _SOCK_TYPE_MASK = 1, 2, 0xF
_SOL_SOCKET = 1
_SO_BUFFERS = (7, 8, 32, 33)  # SO_SNDBUF, SO_RCVBUF, SO_SNDBUFFORCE, SO_RCVBUFFORCE
_TIOCSCTTY = 0x540E
# Calls that set a file's mode: (argument holding the mode, argument holding open's flags or
# None when the call always sets it). S_ISUID | S_ISGID are refused in the mode.
_MODE_ARGS = {"chmod": (1, None), "fchmod": (1, None), "fchmodat": (2, None),
              "fchmodat2": (2, None), "creat": (1, None), "mknod": (1, None),
              "mknodat": (2, None), "open": (2, 1), "openat": (3, 2)}
_SET_ID_BITS = 0o6000
_O_CREAT, _O_TMPFILE_BIT = 0o100, 0o20000000  # a mode counts only when open creates
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME
_CLONE_NEW_ANY = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 \
    | 0x40000000 | 0x00000080


def _errno_ret(code: int) -> int:
    return 0x00050000 | code


class _Program:
    """A tiny BPF assembler: instructions with forward jumps to named labels."""

    def __init__(self) -> None:
        self.ins: list[list] = []
        self.labels: dict[str, int] = {}

    def emit(self, code: int, k: int, jt: object = 0, jf: object = 0) -> None:
        self.ins.append([code, jt, jf, k])

    def label(self, name: str) -> None:
        self.labels[name] = len(self.ins)

    def resolve(self) -> list[tuple[int, int, int, int]]:
        out = []
        for i, (code, jt, jf, k) in enumerate(self.ins):
            out.append((code, self._rel(jt, i), self._rel(jf, i), k))
        return out

    def _rel(self, target: object, at: int) -> int:
        offset = target if isinstance(target, int) else self.labels[target] - at - 1
        if not 0 <= offset <= 255:  # BPF conditional jumps are 8 bits
            raise ValueError(f"seccomp jump of {offset} instructions")
        return offset


def _seccomp_program(network: bool = True) -> list[tuple[int, int, int, int]] | None:
    """The filter; `network` False (a sandbox without the network) also refuses IP sockets
    but datagram ones and sendmsg/sendmmsg (the only way to pass descriptors)."""
    arch = _ARCHES.get(_MACHINE)
    if arch is None:
        return None
    audit_arch, column = arch
    nr = {name: numbers[column] for name, numbers in _SYSCALLS.items()
          if numbers[column] is not None}
    eperm, eagain, enosys = (_errno_ret(errno.EPERM), _errno_ret(errno.EAGAIN),
                             _errno_ret(errno.ENOSYS))
    me = os.getpid()
    p = _Program()
    p.emit(_LD_W_ABS, 4)                                  # A = arch
    p.emit(_JEQ, audit_arch, 1, 0)                         # native ABI: go on
    p.emit(_RET, eperm)                                    # foreign ABI (int 0x80): deny all
    p.emit(_LD_W_ABS, 0)                                   # A = syscall number
    p.emit(_JGE, 0x40000000, 0, 1)                         # x32 ABI numbers: deny
    p.emit(_RET, eperm)
    # Syscalls newer than this filter (kernels add some every release) are refused until
    # they are reviewed: numbers from 424 on are the same on every architecture.
    p.emit(_JGE, _FIRST_UNREVIEWED, "nosys", 0)
    for name in _DENIED:
        if name in nr:
            p.emit(_JEQ, nr[name], "deny", 0)
    for name in ("fork", "vfork"):
        if name in nr:
            p.emit(_JEQ, nr[name], "again", 0)
    p.emit(_JEQ, nr["clone3"], "nosys", 0)                 # glibc falls back to clone
    p.emit(_JEQ, nr["clone"], "clone", 0)
    p.emit(_JEQ, nr["kill"], "kill", 0)
    p.emit(_JEQ, nr["tgkill"], "tgkill", 0)
    p.emit(_JEQ, nr["prlimit64"], "prlimit", 0)
    p.emit(_JEQ, nr["socket"], "socket", 0)
    p.emit(_JEQ, nr["socketpair"], "socketpair", 0)
    p.emit(_JEQ, nr["prctl"], "prctl", 0)
    p.emit(_JEQ, nr["fcntl"], "fcntl", 0)
    p.emit(_JEQ, nr["flock"], "noop", 0)
    p.emit(_JEQ, nr["setsockopt"], "setsockopt", 0)
    p.emit(_JEQ, nr["ioctl"], "ioctl", 0)
    if not network:
        # SCM_RIGHTS: a socket sent inside itself is unreachable, its buffers and the files
        # in flight beyond RLIMIT_NOFILE (and a terminal's master parked there hung up later).
        # Only stream socketpairs carry it here, and nothing without the network needs
        # sendmsg (glibc's resolver uses sendmmsg: with the network both stay).
        p.emit(_JEQ, nr["sendmsg"], "deny", 0)
        p.emit(_JEQ, nr["sendmmsg"], "deny", 0)
    p.emit(_JEQ, nr["openat2"], "nosys", 0)                # its mode is in a struct: glibc
    for name in _MODE_ARGS:                                 # and Python use openat
        if name in nr:
            p.emit(_JEQ, nr[name], f"mode-{name}", 0)
    p.emit(_RET, _ALLOW)
    # No set-user-ID or set-group-ID file: in a writable path the code made one (chmod 4755)
    # that stays on the host, owned by the sandbox's host uid (jarvis's own uid when jarvis
    # is not root): any local user who ran it became that uid (which owns every sandbox's
    # user namespace, or holds jarvis's files).
    for name, (mode_arg, flags_arg) in _MODE_ARGS.items():
        if name not in nr:
            continue
        p.label(f"mode-{name}")
        if flags_arg is not None:
            p.emit(_LD_W_ABS, 16 + 8 * flags_arg)
            p.emit(_JSET, _O_CREAT | _O_TMPFILE_BIT, 0, "allow")
        p.emit(_LD_W_ABS, 16 + 8 * mode_arg)
        p.emit(_JSET, _SET_ID_BITS, "deny", "allow")
    # F_SETSIG chooses the signal sent when a descriptor gets ready (SIGIO by default, which
    # cannot resume a stopped process): with SIGCONT, a write to its own pipe or socket
    # (from jarvis, or from a peer) would wake the frozen interpreter.
    p.label("fcntl")
    p.emit(_LD_W_ABS, 24)                                  # A = cmd
    p.emit(_JEQ, _F_SETSIG, "deny", 0)
    p.emit(_JEQ, _F_SETLEASE, "deny", 0)
    p.emit(_JEQ, _F_SETPIPE_SZ, "deny", 0)
    for cmd in _LOCKS:
        p.emit(_JEQ, cmd, "noop", 0)
    p.emit(_RET, _ALLOW)
    # Socket buffers stay at the host's defaults (net.core.[rw]mem_default): SO_SNDBUF up to
    # a raised wmem_max parked 3.1 GB in one paused repl with memory_mb = 512.
    p.label("setsockopt")
    p.emit(_LD_W_ABS, 24)                                  # A = level
    p.emit(_JEQ, _SOL_SOCKET, 0, "allow")
    p.emit(_LD_W_ABS, 32)                                  # A = option
    for option in _SO_BUFFERS:
        p.emit(_JEQ, option, "deny", 0)
    p.emit(_RET, _ALLOW)
    p.label("ioctl")                                       # no controlling terminal
    p.emit(_LD_W_ABS, 24)
    p.emit(_JEQ, _TIOCSCTTY, "deny", "allow")
    # PR_SET_PDEATHSIG stays as the worker set it: cleared, the namespace's init (the worker,
    # with isolation "namespaces") outlived a SIGKILLed jarvis. PR_SET_DUMPABLE too (see
    # apply_limits).
    p.label("prctl")
    p.emit(_LD_W_ABS, 16)                                  # A = option
    p.emit(_JEQ, _PR_SET_PDEATHSIG, "deny", 0)
    p.emit(_JEQ, _PR_SET_DUMPABLE, "deny", "allow")
    # socket() of the families the network namespace and Landlock govern only: IPv4, IPv6
    # and netlink (getaddrinfo asks it for the interfaces). No AF_UNIX: connect() to a socket
    # file in a mounted folder (a server of the host's) is no file access Landlock checks.
    # No AF_VSOCK: it ignores network namespaces (before Linux 7.0, and a VM guest's always),
    # so in a VM (Firecracker, Kata) the code reached the VM host's services with network =
    # false. Nor the rest (packet, ALG, XDP, ...): kernel surface the code has no use for.
    # Without the network, IP sockets are datagram ones only: TCP's buffers grow by themselves
    # (tcp_rmem's maximum, 6 MB a socket; SCTP's likewise) over the sandbox's own loopback,
    # and Landlock's network rules cover TCP alone (and need ABI 4).
    p.label("socket")
    p.emit(_LD_W_ABS, 16)                                  # A = domain
    p.emit(_JEQ, _AF_NETLINK, "allow", 0)
    p.emit(_JEQ, _AF_INET, "ip", 0)
    p.emit(_JEQ, _AF_INET6, "ip", "deny")
    p.label("ip")
    if network:
        p.emit(_RET, _ALLOW)
    else:
        p.emit(_LD_W_ABS, 24)                              # A = type
        p.emit(_AND, _SOCK_TYPE_MASK)
        p.emit(_JEQ, _SOCK_DGRAM, "allow", "deny")
    # AF_UNIX stream pairs only (asyncio needs one): a datagram pair's sendto(path) reached a
    # host socket in a folder shown read-only; a connected stream socket has no destination
    # to change (sendto with an address and connect fail).
    p.label("socketpair")
    p.emit(_LD_W_ABS, 16)
    p.emit(_JEQ, _AF_UNIX, 0, "deny")
    p.emit(_LD_W_ABS, 24)
    p.emit(_AND, _SOCK_TYPE_MASK)
    p.emit(_JEQ, _SOCK_STREAM, "allow", "deny")
    p.label("clone")                                       # threads only, no new namespaces
    p.emit(_LD_W_ABS, 16)                                  # A = low word of the flags
    p.emit(_JSET, _CLONE_NEW_ANY, "deny", 0)
    p.emit(_JSET, _CLONE_THREAD, "allow", "again")
    p.label("kill")                                        # itself: pid, 0, -pid (own group)
    p.emit(_LD_W_ABS, 16)
    p.emit(_JEQ, me, "allow", 0)
    p.emit(_JEQ, 0, "allow", 0)
    p.emit(_JEQ, (-me) & 0xFFFFFFFF, "allow", "deny")
    p.label("tgkill")                                      # its own threads only
    p.emit(_LD_W_ABS, 16)
    p.emit(_JEQ, me, "allow", "deny")
    p.label("prlimit")                                     # read own limits only (pid 0,
    p.emit(_LD_W_ABS, 16)                                  # new_limit NULL)
    p.emit(_JEQ, 0, 0, "deny")
    p.emit(_LD_W_ABS, 20)
    p.emit(_JEQ, 0, 0, "deny")
    p.emit(_LD_W_ABS, 32)
    p.emit(_JEQ, 0, 0, "deny")
    p.emit(_LD_W_ABS, 36)
    p.emit(_JEQ, 0, "allow", "deny")
    p.label("allow")
    p.emit(_RET, _ALLOW)
    p.label("deny")
    p.emit(_RET, eperm)
    p.label("again")
    p.emit(_RET, eagain)
    p.label("nosys")
    p.emit(_RET, enosys)
    # A record lock or flock() succeeds and does nothing. The interpreter is one process (no
    # fork), so its locks coordinate nothing inside the sandbox; outside, a lock on a SQLite
    # database mounted read-only kept it "locked" for the host while the repl sat frozen.
    p.label("noop")
    p.emit(_RET, _errno_ret(0))
    return p.resolve()


def install_seccomp(network: bool = True) -> bool:
    """Install the filter; False where the platform has none (OSError if it fails)."""
    prog = _seccomp_program(network)
    if prog is None or not sys.platform.startswith("linux"):
        return False

    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                    ("k", ctypes.c_uint)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

    filters = (SockFilter * len(prog))(*[SockFilter(*ins) for ins in prog])
    fprog = SockFprog(len(prog), filters)
    pr_set_no_new_privs, pr_set_seccomp, seccomp_mode_filter = 38, 22, 2
    # Where the filter exists it must be in force: a failure stops the sandbox from starting
    # (doctor and the docs say seccomp is a layer; it is never silently missing).
    if _libc.prctl(pr_set_no_new_privs, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS failed")
    if _libc.prctl(pr_set_seccomp, seccomp_mode_filter, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "cannot install the seccomp filter")
    return True


# --- limits ----------------------------------------------------------------------------------
def _set(limit: int, soft: int, hard: int | None = None) -> None:
    try:
        resource.setrlimit(limit, (soft, soft if hard is None else hard))
    except (ValueError, OSError):
        pass


def apply_limits(config: dict) -> dict:
    _set(resource.RLIMIT_AS, int(config["memory_mb"]) * 1024 * 1024)
    _set(resource.RLIMIT_CORE, 0)
    # No core dump at all: where kernel.core_pattern is a pipe (apport, systemd-coredump) the
    # kernel ignores RLIMIT_CORE 0 and runs that helper, as root on the host, on the crashed
    # sandbox's memory; a non-dumpable process is never dumped. jarvis still reads the
    # worker's /proc files: it owns the sandbox's user namespace (or is root).
    if _libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_DUMPABLE failed")
    _set(resource.RLIMIT_FSIZE, int(config["max_file_mb"]) * 1024 * 1024)
    _set(resource.RLIMIT_NOFILE, int(config["max_open_files"]))
    # Pending signals are counted for the host uid too (the person's, as a normal user):
    # 96 000 queued real-time signals made timer_create fail in every process of that uid.
    # Past the limit a kill() still arrives, without its queued information.
    _set(resource.RLIMIT_SIGPENDING, SIGPENDING)
    session_cpu = int(config["session_cpu_seconds"])
    # The first call's soft limit already: jarvis's "CPU used + cpu_seconds, rounded up" for
    # a start that took under a second (jarvis sets it again only when a call needs another).
    _set(resource.RLIMIT_CPU, min(session_cpu, int(config["cpu_seconds"]) + 1), session_cpu)
    threads = bound_threads(int(config["max_threads"])) if config.get("landlock") else 0
    landlock = apply_landlock(config["landlock"]) if config.get("landlock") else 0
    sandboxed = install_seccomp(bool(config.get("network", True)))
    if not sandboxed:
        _set(resource.RLIMIT_NPROC, 0)  # binds only non-root users
    return {"seccomp": sandboxed, "landlock": landlock, "max_threads": threads}


def bound_threads(limit: int) -> int:
    """RLIMIT_NPROC = limit: threads and processes of the sandbox together (the kernel counts
    them per user namespace). Returns the limit, or 0 where the kernel does not apply it (the
    sandbox runs as the host's root, or holds CAP_SYS_RESOURCE there): tried for real, with
    the soft limit at 1 one more thread must be refused."""
    import _thread

    _set(resource.RLIMIT_NPROC, 1, limit)
    try:
        _thread.start_new_thread(int, ())
        bound = False
    except RuntimeError:  # "can't start new thread": EAGAIN from clone
        bound = True
    _set(resource.RLIMIT_NPROC, limit)
    return limit if bound else 0
