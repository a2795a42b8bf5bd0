-- The fence in front of every write of the leader's duties: put before
-- clean.lua, trim.lua and forget.lua (see scripts/mod.rs), which begin with
-- `if not fenced(KEYS[1], ARGV[1]) then return -1 end`.
--
-- Two kinds, told apart by ARGV[1]:
-- - the leader's token (one Redis): KEYS[1] is the leader lease, and the
--   write goes ahead only while the lease holds exactly this token;
-- - 'epoch:N' (a cluster, where the lease lives in another hash slot than
--   the keys written): N was issued by epoch.lua to the lease holder, and
--   is larger for every pass of every later leader. KEYS[1] is a fence key
--   in the hash slot written, holding the largest N any write there showed:
--   a smaller N is refused (a newer leader has written here), a larger one
--   is stored. A stale leader is so refused in every slot a newer one has
--   touched; in a slot it has not touched yet, the stale write is one the
--   stale leader could have made just before it lost the lease.
-- A token never looks like 'epoch:N' (it has a '/').

local FENCE_TTL_SECS = 86400

local function fenced(key, arg)
    local epoch = tonumber(string.match(arg, '^epoch:(%d+)$'))
    if epoch == nil then
        -- pcall: a lease key of another type (written by something else)
        -- holds no token of ours: fenced out, the lease lost, not an error
        -- that stops the process.
        return redis.pcall('GET', key) == arg
    end
    local seen = tonumber(redis.call('GET', key)) or 0
    if epoch < seen then
        return false
    end
    if epoch > seen then
        redis.call('SET', key, epoch, 'EX', FENCE_TTL_SECS)
    end
    return true
end

