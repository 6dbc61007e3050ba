"""Inside a sandbox for a command (an MCP server): limit, restrict, then exec it.

Run as `python -I -S /.jarvis/exec_shim.pyc '<config json>' COMMAND ARGS...` (standard
library, and confine.py's bytecode beside it): sets RLIMIT_NPROC (processes and threads of
the sandbox together, counted per user namespace), RLIMIT_NOFILE, RLIMIT_CORE 0 and
RLIMIT_SIGPENDING, restricts itself with Landlock (the mounted paths only; no TCP without the
network; signals and abstract unix sockets scoped to the sandbox), sets no_new_privs and
execs the command with the environment the sandbox was given. Unlike model-written Python the
command may start processes (a server runs `git`): no seccomp filter here, the namespaces,
Landlock and the limits bound it.

With "egress" in the config (a server given hosts in `network`), it first makes the proxy's
listening socket on the sandbox's own loopback and hands it to jarvis over the unix socket
mounted for it (netproxy.py): jarvis accepts on it, the server only connects to it (Landlock
allows TCP connections to that port alone, and binds to none).
"""

import json
import os
import resource
import socket
import sys

HANDOFF = b"jarvis-egress-listener"  # as netproxy.HANDOFF


def hand_over_listener(path: str, host: str, port: int) -> None:
    """Listen on host:port (in this network namespace) and give the socket to jarvis."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen(64)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(10)
        conn.connect(path)
        socket.send_fds(conn, [HANDOFF], [listener.fileno()])
        if conn.recv(2) != b"ok":
            raise OSError("jarvis did not take the network proxy's socket")
    listener.close()  # jarvis holds it now; the command never accepts on it


def main() -> None:
    config = json.loads(sys.argv[1])
    argv = sys.argv[2:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import confine

    for limit, value in ((resource.RLIMIT_NPROC, config["max_processes"]),
                         (resource.RLIMIT_NOFILE, config["max_open_files"]),
                         (resource.RLIMIT_CORE, 0),
                         (resource.RLIMIT_SIGPENDING, confine.SIGPENDING)):
        resource.setrlimit(limit, (value, value))
    try:
        if config.get("egress"):  # before Landlock, which allows no TCP bind
            egress = config["egress"]
            hand_over_listener(egress["socket"], egress["host"], egress["port"])
        confine.apply_landlock(config["landlock"])
    except OSError as exc:
        sys.stderr.write(f"sandbox setup failed: {exc}\n")
        sys.exit(127)
    os.execv(argv[0], argv)


if __name__ == "__main__":
    main()
