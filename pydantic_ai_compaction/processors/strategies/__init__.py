"""Strategies: each proposes a layout (what to keep, what summary replaces the rest); the runtime decides."""
