"""xla/tests/replicated_io_feed_test.cc (fixture ReplicatedIOFeedTest), transcribed.

Each replica reads one item from its infeed (10 x its replica id), adds its replica id and
writes the sum to its outfeed; the module's result is the outfeed's token.
"""

from __future__ import annotations

from .records import Case, arr

SOURCE = "xla/tests/replicated_io_feed_test.cc"

CASES: list[Case] = [
    Case(name="ReplicatedIOFeedTest.InfeedAndOutfeed", source=SOURCE,
         test="ReplicatedIOFeedTest.InfeedAndOutfeed", n=4, replica_count=4, module="""HloModule infeed
ENTRY main {
  // Read from infeed, add replica_id, and send to outfeed.
  token0 = token[] after-all()
  infeed = (u32[], token[]) infeed(token0)
  infeed.data = u32[] get-tuple-element(infeed), index=0
  infeed.token = token[] get-tuple-element(infeed), index=1
  replica_id = u32[] replica-id()
  result = u32[] add(infeed.data, replica_id)
  outfeed = token[] outfeed(result, infeed.token), outfeed_shape=u32[]
}
""", infeed=tuple((arr("u32", 10 * d),) for d in range(4)),
         outfeed=tuple((arr("u32", 11 * d),) for d in range(4))),
]

SKIPPED: dict[str, str] = {}
