-- Move a window record that cannot be read back (fields missing, cells that
-- do not decode) aside, so it never again blocks its owner's sync or the
-- recovery other workers run. Every key here shares the stream's Cluster slot.
--
-- KEYS[1] the record        KEYS[2] windows (ZSET)
-- KEYS[3] dead-letter stream KEYS[4] stream
-- ARGV[1] window id  ARGV[2] reason  ARGV[3] dead MAXLEN  ARGV[4] group
-- ARGV[5] chunks of it already applied (read by the caller from its marker)
--
-- The dead letter holds the reason, the record's key and every field of it
-- raw ('raw:FIELD'). If no chunk was applied, the window's entries stay
-- pending and are counted again by whoever reads them next (nothing lost,
-- nothing twice). If some were, counting them again would count those twice:
-- they are acknowledged instead, and the dead letter says how many.
-- Returns {moved (0|1), entries acknowledged}.

if redis.call('EXISTS', KEYS[1]) == 0 then
    redis.call('ZREM', KEYS[2], ARGV[1])
    return {0, 0}
end
local raw = redis.call('HGETALL', KEYS[1])
local applied = tonumber(ARGV[5]) or 0
local acked = 0
if applied > 0 then
    local ids = redis.call('HGET', KEYS[1], 'ids')
    if ids then
        local batch = {}
        for id in string.gmatch(ids, '%S+') do
            batch[#batch + 1] = id
            if #batch == 2000 then
                acked = acked + redis.call('XACK', KEYS[4], ARGV[4], unpack(batch))
                batch = {}
            end
        end
        if #batch > 0 then
            acked = acked + redis.call('XACK', KEYS[4], ARGV[4], unpack(batch))
        end
    end
end
local args = {'MAXLEN', '~', ARGV[3], '*', 'reason', 'corrupt_record', 'error', ARGV[2],
    'key', KEYS[1], 'window', ARGV[1], 'applied_chunks', applied, 'acknowledged', acked}
for i = 1, #raw, 2 do
    args[#args + 1] = 'raw:' .. raw[i]
    args[#args + 1] = raw[i + 1]
end
redis.call('XADD', KEYS[3], unpack(args))
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return {1, acked}
