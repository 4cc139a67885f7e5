"""The channels a conversation reaches a person through (email; the web chat is the gateway's)."""
