-- Take a lease (the leader's, or a shard's) if nobody holds it.
--
-- KEYS[1] lease key   ARGV[1] token   ARGV[2] lease length in ms
-- Returns 1 when taken, 0 when held by another, 2 when taken from a key no
-- holder wrote: another type, or a string without an expiry (every lease
-- expires). Such a key would otherwise hold the lease for ever, and with it
-- the cleaning and the trimming.

if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    return 1
end
local value = redis.pcall('GET', KEYS[1])
if type(value) == 'table' and value.err or redis.call('PTTL', KEYS[1]) == -1 then
    redis.call('DEL', KEYS[1])
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return 2
end
return 0
