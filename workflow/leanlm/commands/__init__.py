"""The ``leanlm`` subcommands, a module per group (data, train, report, bench, share); :mod:`leanlm.cli` builds
the parser from them, in the order ``leanlm --help`` lists them."""
