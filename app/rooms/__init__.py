"""Instructor-synced rooms: the service, and where rooms live (this process or Redis)."""
