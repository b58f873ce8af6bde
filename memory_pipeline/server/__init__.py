"""The agent memory server (`memory-pipeline serve`): one MCP endpoint composing the domains' agent
tools (the tower's 13 ``mem/*``, ``memory/search``, ``temporal/prompt_block``, the object memory's
``objects/*`` reads) behind bearer tokens scoped to worlds. It sits
outside the domain cores, as operations/ does: it reads several domains' APIs and the access
domain's tokens, and no domain imports it."""
