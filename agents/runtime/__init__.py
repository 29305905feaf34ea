"""The agent runtime: the pool that runs agents as threads, the context each one works in, the
tree's lifecycle (deadlines, reports, waits, ending sub-agents) and what the runtime does when
the parts under it fail. Tools and the loop reach the pool only through `context.Runtime`."""
