"""The Django admin: every run, its tree and its records, for staff.

Agents are the only writers of what they record (states, steps, usage, events), so those
fields and models are read-only here; runs start through the API or the page (run_start
does what a bare insert would not: limits, root, first state, event), so the admin never adds
one, and what run_start fixed (owner, tree, model, task) stays as it set it. Documents are
added through the datasets service, as the API adds them. Deleting and cancelling go
through the services, which cancel working agents first. Every list page joins what it shows
(list_select_related) so it runs a fixed number of queries however many rows it holds.
"""

from research.admin import datasets, records, remote, runs  # noqa: F401  (each registers its pages)
