"""JAX (XLA) asked for one array larger than the card: RESOURCE_EXHAUSTED with the BFC
allocator's report (model-too-large's shape, in JAX's words)."""
import jax
import jax.numpy as jnp

print("jax", jax.__version__, jax.devices())
key = jax.random.PRNGKey(0)
params = [jax.random.normal(key, (32768, 32768), dtype=jnp.float32) for _ in range(40)]
print(sum(p.size for p in params) / 1e9, "B parameters")
