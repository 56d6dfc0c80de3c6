"""The private descriptor pool that holds Convoy's `inference.*` protocol types.

tritonclient registers the same `inference.*` symbols in protobuf's default pool, and protobuf
refuses duplicate symbols. Keeping Convoy's descriptors in a pool of their own lets the server's
modules and the real client share one process (tests, a Python model calling another server).
This holds for protobuf's default upb backend; the pure-Python backend still registers every
generated class in the default pool, so there the two cannot share a process.
"""

from google.protobuf.descriptor_pool import DescriptorPool

POOL: DescriptorPool = DescriptorPool()
