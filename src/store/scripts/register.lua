-- Register (or keep registered) a worker's consumer name: one live process
-- per name. Shares the stream's Cluster slot.
--
-- KEYS[1] registration key   ARGV[1] token   ARGV[2] lifetime in ms
-- Takes the name when free, extends it when it holds this token. Returns
-- {1, token} when the name is this worker's now, {0, holder} when another
-- live worker holds it.

local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, holder}
end
if not holder then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return {1, ARGV[1]}
end
return {0, holder}
