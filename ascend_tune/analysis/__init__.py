"""Pure functions over logs, dumps and traces; plots; the trace advisor."""
