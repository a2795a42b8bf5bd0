-- Issue a fencing epoch to the holder of the leader lease, for one pass of
-- its duties on a cluster (see fence.lua).
--
-- KEYS[1] leader lease   KEYS[2] the leader's epoch counter (same slot)
-- ARGV[1] the leader's token
-- Returns the new epoch (≥ 1), larger than any issued before, or -1 when
-- the lease does not hold this token: an epoch is only ever issued to the
-- leader of the moment, so a later leader's epochs are always larger.

if redis.call('GET', KEYS[1]) ~= ARGV[1] then
    return -1
end
return redis.call('INCR', KEYS[2])
