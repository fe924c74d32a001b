"""The pure protocol core (protocol.md §1–§3, §5, §6): no sockets, no files, no clocks."""
