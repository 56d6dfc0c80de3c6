"""Convoy's server: the composition root (`cli`, `app`, `settings`) over three layers, each a
package: `contract` (what a front-end process and the core share and send each other), `frontend`
(the gRPC and HTTP edges) and `core` (repository, schedulers, instances, statistics). Importing
this package loads none of them."""

__all__: list[str] = []
