-- Release the leader lease at shutdown, only if it still holds this
-- worker's token (never delete a lease another worker took meanwhile).
--
-- KEYS[1] lease key   ARGV[1] token
-- Returns 1 when released, 0 when it was not ours (a key of another type
-- included: left to acquire.lua, which takes it over).

if redis.pcall('GET', KEYS[1]) == ARGV[1] then
    redis.call('DEL', KEYS[1])
    return 1
end
return 0
