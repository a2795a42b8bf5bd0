-- The live workers of a sharded stream, so that they can share its shards:
-- each worker calls this about once a second and reads ~shards/live of them.
--
-- KEYS[1] ZSET worker -> expiry (ms on the Redis clock)
-- ARGV[1] this worker   ARGV[2] its lifetime in ms, or 0 when it leaves
-- Returns how many workers are live (this one included unless leaving).

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local lifetime = tonumber(ARGV[2])
if lifetime > 0 then
    redis.call('ZADD', KEYS[1], now + lifetime, ARGV[1])
    redis.call('PEXPIRE', KEYS[1], lifetime)
else
    redis.call('ZREM', KEYS[1], ARGV[1])
end
return redis.call('ZCARD', KEYS[1])
