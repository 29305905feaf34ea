"""The command line (`manage.py research ...`): the helpers behind its subcommands.

The command reads and writes through research.selectors and research.services, scoped to
one user, like the REST API; these modules only find that user, render, export and watch.
"""
