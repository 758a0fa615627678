"""Instruments inside a rank: memory, bytes on the wire, the forward clock, FLOPs, state bytes, gradient
errors, the same-launch local steps, profiler traces and the checkpoint window."""
