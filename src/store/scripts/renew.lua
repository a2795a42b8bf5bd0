-- Renew the leader lease, only while it still holds this worker's token.
--
-- KEYS[1] lease key   ARGV[1] token   ARGV[2] lease length in ms
-- Returns 1 when renewed, 0 when the lease is gone or someone else's (the
-- caller is then no longer leader and must stop acting as one), or a key
-- of another type (written by something else: acquire.lua takes it over).

if redis.pcall('GET', KEYS[1]) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return 1
end
return 0
