"""flashscope's simulator: FlashAttention as tile programs, their numerics, traffic and timing.

Pure NumPy. Nothing here imports torch, triton or FastAPI, so the CLI's `traffic` and
`simulate` commands start fast and the simulator can run anywhere.
"""
