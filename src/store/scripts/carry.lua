-- Record the summed coarse cells of several windows as a window of their
-- own (the carry), taking those cells out of the windows it sums, in one
-- atomic step next to the stream. Every key here shares the stream's slot
-- (used on one Redis only: on a cluster windows are applied whole).
--
-- KEYS[1] windows (ZSET)   KEYS[2] record of the carry   KEYS[3] this
--         consumer name's registration (see register.lua)
-- KEYS[2+2i], KEYS[3+2i] (i = 1..n) record and applied marker of window i
-- ARGV[1] consumer  ARGV[2] this worker's registration token
-- ARGV[3] registration lifetime, ms   ARGV[4] marker TTL, seconds
-- ARGV[5] carry id  ARGV[6] its cells (MessagePack)  ARGV[7] cells per chunk
-- ARGV[8] chunk count   ARGV[9] n, then per window: its id, the first and
--         the last + 1 of its chunks whose cells the carry holds
--
-- Each window was committed by this consumer and applied but for those
-- chunks; its entries are still pending. The carry marks those chunks
-- applied in the window's marker (so that whoever finishes the window,
-- this worker or another one recovering it, never applies them) and the
-- window as carried. It refuses, writing nothing, when a window is gone
-- or not this consumer's, already carried, or has one of those chunks
-- applied (another worker is finishing it): {'gone', window}; the worker
-- then resyncs, and the windows are finished one by one as recorded.
-- Returns {'ok'|'dup'|'taken'|'gone', detail}.

local consumer, token, lifetime, ttl = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local holder = redis.call('GET', KEYS[3])
if holder ~= token then
    if holder then
        return {'taken', holder}
    end
    redis.call('SET', KEYS[3], token, 'PX', lifetime)
end
if redis.call('EXISTS', KEYS[2]) == 1 then
    return {'dup', ARGV[5]}
end

local n = tonumber(ARGV[9])
for i = 1, n do
    local record, marker, a = KEYS[2 + 2 * i], KEYS[3 + 2 * i], 7 + 3 * i
    local owner = redis.call('HGET', record, 'owner')
    -- HGET, not HEXISTS: the commands of deploy/redis/hitcount.acl suffice.
    if owner ~= consumer or redis.call('HGET', record, 'carried') then
        return {'gone', ARGV[a]}
    end
    for c = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]) - 1 do
        if redis.call('HGET', marker, c) then
            return {'gone', ARGV[a]}
        end
    end
end

for i = 1, n do
    local record, marker, a = KEYS[2 + 2 * i], KEYS[3 + 2 * i], 7 + 3 * i
    redis.call('HSET', record, 'carried', ARGV[5])
    local first, last = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
    for c = first, last - 1 do
        redis.call('HSET', marker, c, '')
    end
    if last > first then
        redis.call('EXPIRE', marker, ttl)
    end
end

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[2], 'owner', consumer, 'epoch', '', 'created', now_ms,
    'ids', '', 'cells', ARGV[6], 'chunk', ARGV[7], 'chunks', ARGV[8])
redis.call('ZADD', KEYS[1], now_ms, ARGV[5])
return {'ok', ARGV[5]}
