"""Rendering memory into a prompt. Pure: no I/O, no clock of its own."""
