"""msgspec Structs for every wire and stored type (PROTOCOL.md, "Data model"). No I/O here."""
