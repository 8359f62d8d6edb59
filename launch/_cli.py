"""``malleable testbed``: make and use the multi-host test cluster (network namespaces as hosts, root only)."""

from __future__ import annotations

import argparse
import os
import sys

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``malleable testbed``."""
    tb = sub.add_parser(
        "testbed",
        help="a multi-host test cluster on this machine: hosts node1..nodeN as network namespaces (root)",
        description="Make hosts node1..nodeN on this Linux machine, each a network namespace on the bridge mbr0 "
                    "(10.77.0.0/24; this machine is 'head'), to try and test multi-host runs without other "
                    "machines. 'launcher' prints the ssh stand-in that MPI launchers and malleable use to reach "
                    "them.",
        epilog="example: malleable testbed up 4 && malleable demo --hosts node1,node2,node3,node4 "
               "--launcher-exec $(malleable testbed launcher); malleable testbed down",
    )
    tsub = tb.add_subparsers(dest="testbed_command", metavar="TESTBED_COMMAND")
    tb.set_defaults(func=lambda args: (tb.print_help(sys.stderr), 2)[1])
    p = tsub.add_parser("up", help="make hosts node1..nodeN (hosts already up are kept)",
                        description="Make hosts node1..nodeN; running it again only adds hosts. Prints the status.")
    p.add_argument("n", type=int, help="number of hosts (1..200)")
    p.set_defaults(func=_up)
    p = tsub.add_parser("down", help="stop what runs on the hosts and remove everything 'up' made",
                        description="Stop the processes still running on the hosts, then remove the hosts, the "
                                    "bridge and the /etc/hosts lines that 'up' recorded.")
    p.set_defaults(func=_down)
    p = tsub.add_parser("status", help="list the hosts, their addresses and states (no root needed)")
    p.set_defaults(func=_status)
    p = tsub.add_parser("hostfile", help="print a hostfile of the hosts (MPICH's HOST:SLOTS, or Open MPI's)")
    p.add_argument("--slots", type=int, default=1, help="slots per host (default 1)")
    p.add_argument("--ompi", action="store_true", help="Open MPI's format: HOST slots=N")
    p.set_defaults(func=_hostfile)
    p = tsub.add_parser("exec", help="run a command on a host (its host name set to the host's)",
                        description="Run CMD on HOST with this environment and directory; exits with CMD's code.")
    p.add_argument("host")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="CMD ...")
    p.set_defaults(func=_exec)
    p = tsub.add_parser("launcher", help="print the path of the ssh stand-in that reaches the hosts",
                        description="Print the path of netns-launch, the ssh stand-in for hydra's -launcher-exec "
                                    "(with -launcher rsh -localhost head), Open MPI's --mca plm_ssh_agent, and "
                                    "malleable's --launcher-exec / MALLEABLE_LAUNCHER_EXEC.")
    p.set_defaults(func=_launcher)


def _print_status(rows: list) -> None:
    if not rows:
        print("no test-cluster hosts (malleable testbed up N makes them)")
    for r in rows:
        print(f"{r.name:8} {r.address:12} {r.state}")


def _up(args: argparse.Namespace) -> int:
    from ._testbed import up

    _print_status(up(args.n))
    return 0


def _down(args: argparse.Namespace) -> int:
    from ._testbed import down

    down()
    return 0


def _status(args: argparse.Namespace) -> int:
    from ._testbed import status

    _print_status(status())
    return 0


def _hostfile(args: argparse.Namespace) -> int:
    from ._testbed import hostfile

    print(hostfile(args.slots, args.ompi), end="")
    return 0


def _exec(args: argparse.Namespace) -> int:
    from malleable.errors import ConfigError

    from ._testbed import exec_argv

    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        raise ConfigError("no command given: malleable testbed exec HOST CMD ...")
    argv = exec_argv(args.host, cmd)
    sys.stdout.flush()
    os.execvp(argv[0], argv)  # noqa: S606 - becomes the command, as ssh HOST CMD does
    return 127   # not reached


def _launcher(args: argparse.Namespace) -> int:
    from ._testbed import launcher

    print(launcher())
    return 0
