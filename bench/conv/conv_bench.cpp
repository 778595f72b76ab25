// bench/conv/conv_bench.cpp — ResNet-18's 3x3 and 7x7 convolutions at batch 1, bias + relu, three ways
// (issue 12, item 3: which convolution to build): modelc's path today (im2col, then dnnl_sgemm,
// then one pass for the epilogue), oneDNN's convolution primitive on plain NCHW tensors (it picks
// gemm:jit) with relu as a post-op, and the same primitive with the layouts left to oneDNN
// ("any": blocked nChw16c, brgconv). The fastest of 30 calls of each, in ms, and GFLOP/s for
// modelc's path. A measurement only; nothing here is linked into modelc.
//   bash bench/conv/run.sh [THREADS]        (make bench-conv)
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>
#include <algorithm>
using namespace dnnl;
static double now(){return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();}
static void im2col(float *col, const float *x, int C, int H, int W, int K, int OH, int OW, int s, int p) {
  int P = OH*OW;
  #pragma omp parallel for collapse(3) schedule(static)
  for (int c=0;c<C;c++) for(int kh=0;kh<K;kh++) for(int kw=0;kw<K;kw++){
    float *row = col + ((size_t)(c*K+kh)*K+kw)*P;
    for(int oh=0;oh<OH;oh++){int ih=oh*s-p+kh; for(int ow=0;ow<OW;ow++){int iw=ow*s-p+kw;
      row[oh*OW+ow] = (ih<0||ih>=H||iw<0||iw>=W)?0.f:x[(size_t)c*H*W+ih*W+iw];}}}
}
int main(int argc,char**argv){
  int shapes[][6]={{3,224,64,7,2,3},{64,56,64,3,1,1},{64,56,128,3,2,1},{128,28,128,3,1,1},{128,28,256,3,2,1},{256,14,256,3,1,1},{256,14,512,3,2,1},{512,7,512,3,1,1}};
  engine eng(engine::kind::cpu,0); stream st(eng);
  for(auto &sh: shapes){int C=sh[0],H=sh[1],O=sh[2],K=sh[3],S=sh[4],P=sh[5];int W=H;int OH=(H+2*P-K)/S+1,OW=OH;
    std::vector<float> x((size_t)C*H*W),w((size_t)O*C*K*K),b(O),y((size_t)O*OH*OW),col((size_t)C*K*K*OH*OW);
    for(size_t i=0;i<x.size();i++)x[i]=(i%7)*0.1f-0.3f; for(size_t i=0;i<w.size();i++)w[i]=(i%5)*0.01f-0.02f; for(int i=0;i<O;i++)b[i]=0.01f*i;
    auto ours=[&]{ im2col(col.data(),x.data(),C,H,W,K,OH,OW,S,P); dnnl_sgemm('N','N',O,OH*OW,C*K*K,1.f,w.data(),C*K*K,col.data(),OH*OW,0.f,y.data(),OH*OW);
      int PP=OH*OW;
      #pragma omp parallel for schedule(static)
      for(int o=0;o<O;o++) for(int i=0;i<PP;i++){float v=y[(size_t)o*PP+i]+b[o]; y[(size_t)o*PP+i]=v<0?0:v;} };
    auto mk=[&](memory::format_tag src_tag, memory::format_tag wt){
      memory::desc sd({1,C,H,W},memory::data_type::f32,src_tag), wd({O,C,K,K},memory::data_type::f32,wt), bd({O},memory::data_type::f32,memory::format_tag::x), dd({1,O,OH,OW},memory::data_type::f32,src_tag);
      convolution_forward::desc cd(prop_kind::forward_inference, algorithm::convolution_direct, sd, wd, bd, dd, {S,S},{P,P},{P,P});
      post_ops po; po.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f); primitive_attr at; at.set_post_ops(po);
      return convolution_forward::primitive_desc(cd, at, eng);};
    auto pd_plain = mk(memory::format_tag::nchw, memory::format_tag::oihw);
    auto pd_any = mk(memory::format_tag::any, memory::format_tag::any);
    convolution_forward cp(pd_plain), ca(pd_any);
    memory xm(pd_plain.src_desc(),eng,x.data()), wm(pd_plain.weights_desc(),eng,w.data()), bm(pd_plain.bias_desc(),eng,b.data()), ym(pd_plain.dst_desc(),eng,y.data());
    memory xa(pd_any.src_desc(),eng), wa(pd_any.weights_desc(),eng), ya(pd_any.dst_desc(),eng);
    memory wp(pd_plain.weights_desc(),eng,w.data()); reorder(wp, wa).execute(st, wp, wa);
    reorder(xm, xa).execute(st, xm, xa); st.wait();
    auto plain=[&]{cp.execute(st,{{DNNL_ARG_SRC,xm},{DNNL_ARG_WEIGHTS,wm},{DNNL_ARG_BIAS,bm},{DNNL_ARG_DST,ym}}); st.wait();};
    auto blocked=[&]{ca.execute(st,{{DNNL_ARG_SRC,xa},{DNNL_ARG_WEIGHTS,wa},{DNNL_ARG_BIAS,bm},{DNNL_ARG_DST,ya}}); st.wait();};
    auto tm=[&](auto f){double best=1e9; for(int r=0;r<30;r++){double t=now(); f(); best=std::min(best,now()-t);} return best*1e3;};
    double to=tm(ours), tp=tm(plain), tb=tm(blocked);
    double gf=2.0*O*OH*OW*C*K*K/1e9;
    printf("C%3d H%3d O%3d k%d s%d: ours %.3f ms (%.0f GF/s)  dnnl-nchw %.3f (%s)  dnnl-blocked %.3f (%s)\n",C,H,O,K,S,to,gf/to*1e3,tp,pd_plain.impl_info_str(),tb,pd_any.impl_info_str());
  }
}
