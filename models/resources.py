"""Resource vectors: cpu in millicores, memory in bytes, pod slots."""

from models.base import Value


class Resources(Value):
    cpu: int = 0
    memory: int = 0
    pods: int = 0

    def __add__(self, other: "Resources") -> "Resources":
        return Resources(
            cpu=self.cpu + other.cpu, memory=self.memory + other.memory, pods=self.pods + other.pods
        )

    def __sub__(self, other: "Resources") -> "Resources":
        return Resources(
            cpu=self.cpu - other.cpu, memory=self.memory - other.memory, pods=self.pods - other.pods
        )

    def fits_in(self, room: "Resources") -> bool:
        return self.cpu <= room.cpu and self.memory <= room.memory and self.pods <= room.pods

    def as_tuple(self) -> tuple[int, int, int]:
        return (self.cpu, self.memory, self.pods)


ZERO = Resources()
