"""What wraps every request: the error shape, body limits, per-client rate limits."""
