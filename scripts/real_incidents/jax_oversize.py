"""JAX: one jitted step whose intermediates (two 64 GiB activations) exceed the 75% of the
card that XLA preallocated (batch-misconfiguration in JAX's words)."""
import jax
import jax.numpy as jnp

print("jax", jax.__version__, jax.devices())


@jax.jit
def step(w, x):
    h = jnp.tanh(x @ w)
    return (h @ w.T).sum()


w = jnp.ones((16384, 16384), jnp.bfloat16)
x = jnp.ones((2 ** 21, 16384), jnp.bfloat16)
print("batch", x.shape, "weights", w.shape)
print(step(w, x))
