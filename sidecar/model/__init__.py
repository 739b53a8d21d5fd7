"""msgspec Structs for every wire and stored type (DESIGN §3). No I/O here."""
