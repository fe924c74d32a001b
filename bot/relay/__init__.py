"""The relay (protocol §4): a built-in zero-trust relay server and a relay client that
loses nothing. Neither ever reads ``ct``: they route sealed envelopes between ids."""
