# Shared set-up for the interop scripts: load Sidekiq 6.4.1, quiet redis-rb 4.8's
# deprecation warnings, and point Sidekiq at the Redis URL given as the first
# argument (or $REDIS_URL). Sidekiq 6.4.1 has no namespace support, so fairjob
# runs without one in these tests.
require 'json'
require 'logger'
require 'sidekiq'
require 'sidekiq/api'

Redis.sadd_returns_boolean = false if Redis.respond_to?(:sadd_returns_boolean=)
Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)

# Keep stdout for the script's one JSON line.
Sidekiq.logger = Logger.new($stderr)
Sidekiq.logger.level = Logger::WARN

REDIS_URL = ARGV[0] || ENV['REDIS_URL'] || abort('usage: ruby <script> <redis-url>')
Sidekiq.configure_client { |config| config.redis = { url: REDIS_URL } }
