-- The bucket fields of one counter hash, unless it is big.
--
-- KEYS[1] count:PREC:NAME   ARGV[1] most fields returned at once
-- Returns the fields (HKEYS) when the hash has at most ARGV[1] of them, else
-- its length as an integer: the caller then pages through it with HSCAN, so
-- no single call holds Redis for long, however big the hash is.

local n = redis.call('HLEN', KEYS[1])
if n > tonumber(ARGV[1]) then
    return n
end
return redis.call('HKEYS', KEYS[1])
