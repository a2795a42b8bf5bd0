-- Trim the stream, as the leader, below what every consumer group still
-- needs, in one bounded step. Runs after fence.lua.
--
-- KEYS[1] the fence: the leader lease, or on a cluster the fence key of the
-- stream's hash slot (fence.lua)   KEYS[2] stream
-- ARGV[1] the fence's argument   ARGV[2] most entries evicted by this call
--
-- A group needs its pending entries (since Redis 7.0, XAUTOCLAIM and XCLAIM
-- silently drop pending entries whose stream entries are gone) and every
-- entry after its last-delivered id. So the stream keeps everything from the
-- smallest of: each group's oldest pending id, and the id right after each
-- group's last-delivered id. Computed and applied in one atomic step, so no
-- group can move back in between. XTRIM MINID ~ with LIMIT evicts whole
-- stream nodes only, at most ARGV[2] entries, so the call stays short.
-- No group: nothing is trimmed (no reader has said what it needs).
-- Returns {entries evicted, the minimum id kept ('' when none)}, or -1 when
-- fenced out (this worker does not hold the lease).

if not fenced(KEYS[1], ARGV[1]) then
    return -1
end
if redis.call('EXISTS', KEYS[2]) == 0 then
    return {0, ''}
end

local function parse(id)
    local ms, seq = string.match(id, '^(%d+)-(%d+)$')
    return tonumber(ms), tonumber(seq)
end
local function less(ams, aseq, bms, bseq)
    return ams < bms or (ams == bms and aseq < bseq)
end

local min_ms, min_seq
local function consider(ms, seq)
    if min_ms == nil or less(ms, seq, min_ms, min_seq) then
        min_ms, min_seq = ms, seq
    end
end

local groups = redis.call('XINFO', 'GROUPS', KEYS[2])
if #groups == 0 then
    return {0, ''}
end
for _, g in ipairs(groups) do
    local info = {}
    for i = 1, #g, 2 do
        info[g[i]] = g[i + 1]
    end
    local ms, seq = parse(info['last-delivered-id'])
    -- The entry right after the last delivered one; ids are 64-bit pairs but
    -- Lua numbers are doubles: exact up to 2^53, far past any ms timestamp
    -- and any sequence a stream reaches.
    consider(ms, seq + 1)
    local pending = redis.call('XPENDING', KEYS[2], info['name'])
    if pending[1] > 0 then
        consider(parse(pending[2]))
    end
end

local minid = string.format('%.0f-%.0f', min_ms, min_seq)
local evicted = redis.call('XTRIM', KEYS[2], 'MINID', '~', minid, 'LIMIT', ARGV[2])
return {evicted, minid}
