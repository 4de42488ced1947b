"""One module per CLI verb: ``HELP``, ``add_arguments(parser)`` and ``main(args, settings)``."""
