"""The agent: its rounds of model call, tool calls and results (`agent`), the parallel and
grouped calls of one turn (`calls`), and the root's review of its draft (`review`): review
returns a verdict and the agent acts on it."""
