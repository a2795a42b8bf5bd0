-- Apply chunks of recorded windows and sums to the counters and statistics,
-- each at most once: the one script that writes them. On a Redis Cluster
-- every key here is in one hash slot (the worker sends one script per slot
-- it touches: see the Rust module `store::commit::apply`).
--
-- KEYS[1..M] applied markers (HASH, field -> failures): the window's or the
--            group's in this slot
-- then per part, part after part: its count:PREC:NAME hashes (one per count
--            cell), then its stats:PREC:NAME hashes (one per statistics cell)
-- ARGV[1] marker TTL in seconds (a safety net: the worker that finishes the
--         window shortens it)
-- ARGV[2] deadline: unix seconds on the Redis clock before which the known:
--         members the worker leaves out of its ZADDs are surely there (0 when
--         none is left out)
-- ARGV[3] M, ARGV[4] P, then per part: its marker's number (1..M), its field
--         in that marker, its count cells n, its statistics cells s
-- then per part: per count cell its bucket field and delta; per statistics
--         cell its bucket B, count, sum, sum of squares, min, max (decimal),
--         H, then H pairs of a histogram field (B:h:SUFFIX) and its count:
--         written as one HSET of B:count, B:sum, B:sumsq and each B:h:SUFFIX
--         (their sums) and of B:min and B:max when lower and higher.
--
-- A part already marked is left alone and reported with its recorded
-- failures, so a replay (a retry after a lost reply, a worker finishing a
-- window or a sum of a stopped one) never counts twice: sums and histograms
-- are not idempotent, and the min/max compare-and-set is safe only under the
-- marker. A cell whose write fails (wrong type, overflow) is left out and
-- reported; the others are counted. The worker adds the known: and
-- stats:known: members after the script (for a replay too): the cleaner
-- drops a member only when its hash is empty, so a counter is never
-- orphaned. Past the deadline nothing is written: {-1, ''}; the worker then
-- applies again with every member. Out of memory: Redis refuses every write,
-- nothing is written, and the error goes back to the worker, which retries.
-- Returns per part its status (1 applied now, 0 already) and its failures,
-- flattened: "cell_number<TAB>error" lines for count cells and
-- "s<statistics cell number><TAB>error" for the others, numbered within the
-- part.

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
    local f = fields[tonumber(ARGV[1 + 4 * i])]
    f[#f + 1] = ARGV[2 + 4 * i]
    at[i] = #f
end
local done = {}
for k = 1, m do
    done[k] = redis.call('HMGET', KEYS[k], unpack(fields[k]))
end

-- One statistics cell: its fields at ARGV[a..]. All or nothing: the fields
-- it adds to are read first (one HMGET, which also fails on a key of
-- another type) and a field that does not hold a number, or a sum that
-- would not be finite, fails the cell before anything is written.
local function observe(key, a)
    local b = ARGV[a]
    local h = tonumber(ARGV[a + 6])
    local names = {b .. ':count', b .. ':sum', b .. ':sumsq', b .. ':min', b .. ':max'}
    for j = 1, h do
        names[5 + j] = ARGV[a + 5 + 2 * j]
    end
    local cur = {}
    for from = 1, #names, 1000 do
        local part = redis.call('HMGET', key, unpack(names, from, math.min(from + 999, #names)))
        for j = 1, #part do
            cur[from + j - 1] = part[j]
        end
    end
    -- Each field read, as a number: parsed once (parsing and printing
    -- doubles is most of what a cell costs here: glibc's are exact, slow).
    local num = {}
    for j = 1, #names do
        local v = cur[j]
        if v then
            local integer = j == 1 or j > 5
            num[j] = (not integer or string.match(v, '^-?%d+$')) and tonumber(v)
            if not num[j] then
                error('statistics field ' .. names[j] .. ' holds ' .. v .. ', not a number')
            end
        end
    end
    -- Every field in one HSET: the fields were just read, so their sums are
    -- known (a command per field cost several times the field).
    local set = {}
    -- The sums of the values and of their squares, as doubles in the
    -- shortest decimal that reads back the same (HINCRBYFLOAT keeps 17 digits
    -- after the point: a sum of 1e-18s was 0, outside [min, max]). A new
    -- field is the worker's own text, already that.
    for j = 2, 3 do
        local text = ARGV[a + j]
        if cur[j] then
            local v = num[j] + tonumber(text)
            if v ~= v or v == math.huge or v == -math.huge then
                error('statistics field ' .. names[j] .. ' would be NaN or infinite')
            end
            -- 15 digits when they read back (a sum of short decimals), else 17.
            text = string.format('%.15g', v)
            if tonumber(text) ~= v then
                text = string.format('%.17g', v)
            end
        elseif string.find(text, '[nN]') then
            -- 'NaN', 'inf': no finite decimal holds an n.
            error('statistics field ' .. names[j] .. ' would be NaN or infinite')
        end
        set[#set + 1] = names[j]
        set[#set + 1] = text
    end
    -- Lua's numbers are doubles: a count that is not surely exact (2^53 or
    -- more) goes by HINCRBY. A new field takes the worker's integer as it is.
    local function add(j, delta)
        if not cur[j] then
            set[#set + 1] = names[j]
            set[#set + 1] = delta
            return
        end
        local v = num[j] + tonumber(delta)
        if math.abs(v) < 9007199254740992 then
            set[#set + 1] = names[j]
            -- A number argument goes to Redis as %.17g: an integer below
            -- 2^53 in plain digits.
            set[#set + 1] = v
        else
            redis.call('HINCRBY', key, names[j], delta)
        end
    end
    add(1, ARGV[a + 1])
    if not cur[4] or tonumber(ARGV[a + 4]) < num[4] then
        set[#set + 1] = names[4]
        set[#set + 1] = ARGV[a + 4]
    end
    if not cur[5] or tonumber(ARGV[a + 5]) > num[5] then
        set[#set + 1] = names[5]
        set[#set + 1] = ARGV[a + 5]
    end
    for j = 1, h do
        add(5 + j, ARGV[a + 6 + 2 * j])
    end
    for from = 1, #set, 2000 do
        redis.call('HSET', key, unpack(set, from, math.min(from + 1999, #set)))
    end
end

local out = {}
local key, a = m + 1, 5 + 4 * p
for i = 1, p do
    local k = tonumber(ARGV[1 + 4 * i])
    local n, s = tonumber(ARGV[3 + 4 * i]), tonumber(ARGV[4 + 4 * i])
    local prior = done[k][at[i]]
    local apply = not prior
    local failed = {}
    for j = 0, apply and n - 1 or -1 do
        local r = redis.pcall('HINCRBY', KEYS[key + j], ARGV[a + 2 * j], ARGV[a + 2 * j + 1])
        if type(r) == 'table' and r.err then
            if string.sub(r.err, 1, 3) == 'OOM' then
                return redis.error_reply(r.err)
            end
            failed[#failed + 1] = (j + 1) .. '\t' .. r.err
        end
    end
    key, a = key + n, a + 2 * n
    for j = 1, s do
        local next_a = a + 7 + 2 * tonumber(ARGV[a + 6])
        if apply then
            local ok, err = pcall(observe, KEYS[key], a)
            if not ok then
                local text = type(err) == 'table' and err.err or tostring(err)
                if string.sub(text, 1, 3) == 'OOM' then
                    return redis.error_reply(text)
                end
                failed[#failed + 1] = 's' .. j .. '\t' .. text
            end
        end
        key, a = key + 1, next_a
    end
    if apply then
        local text = table.concat(failed, '\n')
        local mk = marks[k]
        mk[#mk + 1] = ARGV[2 + 4 * i]
        mk[#mk + 1] = text
        out[#out + 1] = 1
        out[#out + 1] = text
    else
        out[#out + 1] = 0
        out[#out + 1] = prior
    end
end
for k = 1, m do
    if #marks[k] > 0 then
        redis.call('HSET', KEYS[k], unpack(marks[k]))
        redis.call('EXPIRE', KEYS[k], ARGV[1])
    end
end
return out
