"""Live kernel runs: the queue of worker processes, the jobs they run, the service on app.state."""
