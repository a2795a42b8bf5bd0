-- Read this consumer's own pending entries after an id, without counting a
-- delivery. (XREADGROUP with an id instead of '>' bumps each entry's delivery
-- count, so a worker that reconnects often would make healthy entries look
-- poisonous to the max-deliveries rule.)
--
-- KEYS[1] stream   ARGV[1] group   ARGV[2] consumer
-- ARGV[3] read after this id (exclusive; '0' from the start)   ARGV[4] count
-- ARGV[5] most bytes: no entry is read once those read take this many (ids,
--         field names and values; the first entry is always read), so a
--         worker that restarts amid large entries re-reads them a few at a time
-- Returns entries as XRANGE does, [id, fields]; an entry deleted from the
-- stream while pending comes back as [id, nil].

local start = '-'
if ARGV[3] ~= '0' then
    start = '(' .. ARGV[3]
end
local budget = tonumber(ARGV[5]) or math.huge
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], start, '+', ARGV[4], ARGV[2])
local out, bytes = {}, 0
for _, p in ipairs(pending) do
    if bytes >= budget then
        break
    end
    local entry = redis.call('XRANGE', KEYS[1], p[1], p[1])[1]
    bytes = bytes + #p[1]
    if entry then
        for _, v in ipairs(entry[2]) do
            bytes = bytes + #v
        end
    end
    out[#out + 1] = entry or {p[1], false}
end
return out
