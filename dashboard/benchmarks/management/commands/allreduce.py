from dashboard.benchmarks.management.commands import collective


class Command(collective.Command):
    help = ("Run an all-reduce bandwidth sweep on this machine and print it like nccl-tests' all_reduce_perf"
            " (sizes take K/M/G suffixes, binary): `manage.py collective all_reduce`.")
    fixed_op = "all_reduce"
