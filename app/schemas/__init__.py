"""Request and response models of the API, with their limit checks against the settings."""
