"""What the asyncio clients (producer, consumer, admin) share: `async with` starts one and closes it."""

from __future__ import annotations

from typing import Self


class AsyncClient:
    async def start(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
