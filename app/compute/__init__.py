"""Costly request work in bounded worker processes, off the server's event loop."""
