"""Derivatives of calls: callees with bodies, rules, registered and custom derivatives, vector intrinsics."""
