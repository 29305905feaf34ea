"""Canopy as an MCP server: the research tools an assistant (Claude Desktop, an IDE agent)
calls to start, follow and read researches, over streamable HTTP at /mcp (`http`) and over
stdio (`manage.py mcp --user NAME`). The tools (`tools`) are one more edge of the domain, like
the REST API: the same selectors and services, the same owner scoping, the same error texts.
"""
