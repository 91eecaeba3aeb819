"""Numerics of every op family against independent numpy references."""
