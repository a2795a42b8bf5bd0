-- Apply the chunks of several carries (sums) that fall in one hash slot,
-- each at most once: on a Redis Cluster a script touches one slot, and one
-- script per slot for every sum applied together (the carries of a
-- process' stream shards, see the Rust module `store::commit::group`)
-- costs a fraction of one per sum and slot.
--
-- KEYS[1..M] the applied markers in this slot of the groups the sums were
--            recorded in (HASH, field SUM:CHUNK -> failures); most often
--            one, two when a carry recorded in one group is applied with
--            the next
-- KEYS[M+1..M+n] count:PREC:NAME hashes, one per cell, part after part
-- ARGV[1] marker TTL in seconds (a safety net: the worker shortens it once
--         every sum of the group is finished)
-- ARGV[2] deadline, as in apply.lua: unix seconds on the Redis clock before
--         which the members left out of the worker's ZADDs are surely in
--         known: (0 when none is left out)
-- ARGV[3] M, ARGV[4] P, then per part: its marker's number (1..M), its
--         marker field, its cell count
-- then per cell, part after part: bucket field, delta
--
-- A part already marked is left alone and reported with its recorded
-- failures, so a replay (a retry after a lost reply, a worker finishing
-- one sum of the group alone) never counts twice. A cell whose write fails
-- (wrong type, overflow) is left out and reported; the others are counted.
-- Past the deadline nothing is written: {-1, ''}.
-- Returns per part its status (1 applied now, 0 already) and its failures
-- ("cell_number<TAB>error" lines, numbered within the part), flattened.

local deadline = tonumber(ARGV[2])
if deadline > 0 and tonumber(redis.call('TIME')[1]) >= deadline then
    return {-1, ''}
end

local m, p = tonumber(ARGV[3]), tonumber(ARGV[4])
local fields, marks, at = {}, {}, {}
for k = 1, m do
    fields[k], marks[k] = {}, {}
end
for i = 1, p do
    local f = fields[tonumber(ARGV[2 + 3 * i])]
    f[#f + 1] = ARGV[3 + 3 * i]
    at[i] = #f
end
local done = {}
for k = 1, m do
    done[k] = redis.call('HMGET', KEYS[k], unpack(fields[k]))
end

local out = {}
local key, a = m + 1, 5 + 3 * p
for i = 1, p do
    local k = tonumber(ARGV[2 + 3 * i])
    local n = tonumber(ARGV[4 + 3 * i])
    local prior = done[k][at[i]]
    if prior then
        out[#out + 1] = 0
        out[#out + 1] = prior
    else
        local failed = {}
        for j = 0, n - 1 do
            local r = redis.pcall('HINCRBY', KEYS[key + j], ARGV[a + 2 * j], ARGV[a + 2 * j + 1])
            if type(r) == 'table' and r.err then
                if string.sub(r.err, 1, 3) == 'OOM' then
                    return redis.error_reply(r.err)
                end
                failed[#failed + 1] = (j + 1) .. '\t' .. r.err
            end
        end
        local text = table.concat(failed, '\n')
        local mk = marks[k]
        mk[#mk + 1] = ARGV[3 + 3 * i]
        mk[#mk + 1] = text
        out[#out + 1] = 1
        out[#out + 1] = text
    end
    key = key + n
    a = a + 2 * n
end
for k = 1, m do
    if #marks[k] > 0 then
        redis.call('HSET', KEYS[k], unpack(marks[k]))
        redis.call('EXPIRE', KEYS[k], ARGV[1])
    end
end
return out
