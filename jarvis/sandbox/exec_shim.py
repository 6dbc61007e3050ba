"""Inside a sandbox for a command (an MCP server): limit, restrict, then exec it.

Run as `python -I -S /.jarvis/exec_shim.py '<config json>' COMMAND ARGS...` (standard library
and worker.py beside it): sets RLIMIT_NPROC (processes and threads of the sandbox together,
counted per user namespace), RLIMIT_NOFILE, RLIMIT_CORE 0 and RLIMIT_SIGPENDING, restricts
itself with Landlock (the mounted paths only; no TCP without the
network; signals and abstract unix sockets scoped to the sandbox), sets no_new_privs and
execs the command with the environment the sandbox was given. Unlike model-written Python the
command may start processes (a server runs `git`): no seccomp filter here, the namespaces,
Landlock and the limits bound it.
"""

import json
import os
import resource
import sys


def main() -> None:
    config = json.loads(sys.argv[1])
    argv = sys.argv[2:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import worker

    for limit, value in ((resource.RLIMIT_NPROC, config["max_processes"]),
                         (resource.RLIMIT_NOFILE, config["max_open_files"]),
                         (resource.RLIMIT_CORE, 0),
                         (resource.RLIMIT_SIGPENDING, worker.SIGPENDING)):
        resource.setrlimit(limit, (value, value))
    try:
        worker.apply_landlock(config["landlock"])
    except OSError as exc:
        sys.stderr.write(f"sandbox setup failed: {exc}\n")
        sys.exit(127)
    os.execv(argv[0], argv)


if __name__ == "__main__":
    main()
